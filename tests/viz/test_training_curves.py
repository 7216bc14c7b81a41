"""`catcap plot-log`: a PNG of a run's log, with the SCST panels when the run had SCST steps."""

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


def test_plot_has_scst_panels_only_for_scst_runs(tmp_path):
    write_log(tmp_path / "xe", scst=False)
    write_log(tmp_path / "scst", scst=True)
    train, val = read_log(tmp_path / "scst" / "log.jsonl")
    assert len(train) == 5 and [v["CIDEr"] for v in val] == [0.4, 0.6]
    xe_png, scst_png = plot_training_log(tmp_path / "xe"), plot_training_log(tmp_path / "scst")
    assert xe_png == tmp_path / "xe" / "training.png"
    with Image.open(xe_png) as a, Image.open(scst_png) as b:
        assert a.format == b.format == "PNG"
        assert b.size[1] > 2 * a.size[1]  # 2 panels vs 7 panels


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
