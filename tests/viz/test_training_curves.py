"""`catcap plot-log`: a PNG of a run's log, with the SCST panels when the run had SCST steps.

Oracle: the log written by ``write_log`` (values from its formulas, worked out by hand); the
figure's lines are read back from the matplotlib Figure that was saved."""

import json
import subprocess
import sys

from PIL import Image

from catcap.viz.training_curves import plot_training_log, read_log


def write_log(path, scst: bool):
    rows = [{"kind": "train", "phase": "xe", "step": s, "loss": 3.0 / s, "xe": 3.0 / s} for s in (1, 2, 3)]
    rows.append({"kind": "val", "phase": "xe", "step": 3, "epoch": 0, "CIDEr": 0.4})
    if scst:
        rows += [{"kind": "train", "phase": "scst", "step": s, "loss": -0.1, "reward": 0.5 + s / 10, "baseline": 0.5,
                  "advantage_std": 0.3, "entropy": 2.0 - s / 10, "length": 9.0, "eos_fraction": 1.0} for s in (4, 5)]
        rows.append({"kind": "val", "phase": "scst", "step": 5, "epoch": 1, "CIDEr": 0.6})
    path.mkdir(parents=True, exist_ok=True)
    (path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def drawn_figures(monkeypatch) -> list:
    """Every matplotlib Figure saved from now on (the figure itself, to read its lines)."""
    from matplotlib.figure import Figure

    figures, save = [], Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: figures.append(fig) or save(fig, *a, **k))
    return figures


def lines(ax) -> dict[str, tuple[list, list]]:
    """{legend label: (x values, y values)} of an Axes' lines."""
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_plot_has_scst_panels_only_for_scst_runs(tmp_path, monkeypatch):
    write_log(tmp_path / "xe", scst=False)
    write_log(tmp_path / "scst", scst=True)
    train, val = read_log(tmp_path / "scst" / "log.jsonl")
    assert len(train) == 5 and [v["CIDEr"] for v in val] == [0.4, 0.6]
    figures = drawn_figures(monkeypatch)
    xe_png, scst_png = plot_training_log(tmp_path / "xe"), plot_training_log(tmp_path / "scst")
    assert xe_png == tmp_path / "xe" / "training.png"
    with Image.open(xe_png) as a, Image.open(scst_png) as b:
        assert a.format == b.format == "PNG"
    xe_fig, scst_fig = figures
    assert len(xe_fig.axes) == 2 and len(scst_fig.axes) == 7  # loss + CIDEr, then 5 SCST panels


def test_the_panels_plot_the_logged_values(tmp_path, monkeypatch):
    """Each panel's lines are the log's numbers (write_log's formulas, worked out by hand):
    XE loss 3/s at steps 1, 2, 3; SCST loss -0.1 and reward 0.5 + s/10 at steps 4, 5; the
    validation CIDEr-D of each phase at its step."""
    write_log(tmp_path / "run", scst=True)
    figures = drawn_figures(monkeypatch)
    plot_training_log(tmp_path / "run")
    loss, cider, reward, spread, entropy, length, eos = figures[0].axes
    assert lines(loss) == {"XE loss": ([1, 2, 3], [3.0, 1.5, 1.0]), "SCST policy loss": ([4, 5], [-0.1, -0.1])}
    assert lines(cider) == {"val CIDEr-D (xe)": ([3], [0.4]), "val CIDEr-D (scst)": ([5], [0.6])}
    assert lines(reward) == {"reward": ([4, 5], [0.9, 1.0]), "baseline": ([4, 5], [0.5, 0.5])}
    assert lines(spread) == {"advantage std": ([4, 5], [0.3, 0.3])}
    assert lines(entropy) == {"entropy": ([4, 5], [1.6, 1.5])}
    assert lines(length) == {"length": ([4, 5], [9.0, 9.0])} and lines(eos) == {"eos fraction": ([4, 5], [1.0, 1.0])}


def test_cli_plots_and_explains_a_missing_log(tmp_path):
    write_log(tmp_path / "run", scst=True)
    ok = subprocess.run([sys.executable, "-m", "catcap", "plot-log", str(tmp_path / "run")], capture_output=True, text=True)
    assert ok.returncode == 0 and "training.png" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "catcap", "plot-log", str(tmp_path / "nothing")], capture_output=True, text=True)
    assert bad.returncode == 2 and "no training log at" in bad.stderr


def test_out_suffix_picks_the_format_and_others_are_refused(tmp_path):
    write_log(tmp_path / "run", scst=True)
    svg = plot_training_log(tmp_path / "run", tmp_path / "curves.svg")
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert plot_training_log(tmp_path / "run", tmp_path / "curves.pdf").read_bytes()[:5] == b"%PDF-"
    bad = subprocess.run([sys.executable, "-m", "catcap", "plot-log", str(tmp_path / "run"), "--out",
                          str(tmp_path / "curves.jpg")], capture_output=True, text=True)
    assert bad.returncode == 2 and "expected a file name ending in .png, .svg, .pdf, found .jpg" in bad.stderr
    assert not (tmp_path / "curves.jpg").exists()


def test_a_mean_baseline_stays_visible_under_the_reward(tmp_path, monkeypatch):
    """With the 'mean' baseline the two series are equal: the baseline is dashed, the reward solid."""
    from catcap.viz import training_curves

    drawn, real = [], training_curves._line
    monkeypatch.setattr(training_curves, "_line",
                        lambda ax, rows, key, label, style="-": drawn.append((key, style)) or real(ax, rows, key, label, style))
    write_log(tmp_path / "run", scst=True)
    plot_training_log(tmp_path / "run")
    assert ("reward", "-") in drawn and ("baseline", "--") in drawn
