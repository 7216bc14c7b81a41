"""A picture of a training run from its ``log.jsonl``: losses, validation CIDEr-D and, for
self-critical training, reward / baseline / entropy / length / ``<eos>`` fraction per step —
what makes an SCST collapse (reward up while entropy and length fall, captions stop ending
with ``<eos>``) visible at a glance.

``plot_training_log(run_dir)`` writes ``run_dir/training.png`` (matplotlib, Agg backend).

A picture under its own name is drawn only from a complete log (docs/reliability.md, "derived
outputs"): when a line of the log is not a well-formed record (damaged, or the last one cut
short by a kill or still being written), the good records are drawn into a new name beside it,
``training.incomplete.png``, and the picture already there is left as it was;
:func:`draw_training_log` returns the bad lines with the path, and ``catcap plot-log`` lists them
and exits with 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from catcap.atomic import atomic_write

PICTURE_SUFFIXES = (".png", ".svg", ".pdf")
SCST_PANELS = (("reward", "baseline", "greedy_reward"), ("advantage_std",), ("entropy",), ("length",), ("eos_fraction",))


PLOTTED = ("loss", "xe", "awc", "CIDEr", *(key for keys in SCST_PANELS for key in keys))


def scan_log(path: str | Path) -> tuple[list[dict], list[dict], list[str]]:
    """(train records, validation records, problems) of a ``log.jsonl``: every well-formed record
    (a JSON object with an integer ``step``, numbers where a panel draws them, a validation
    record's ``CIDEr``), and one line per line that is not one, saying why."""
    train, val, problems = [], [], []
    raw = Path(path).read_bytes().decode("utf-8", errors="replace").split("\n")
    numbered = [(n, line) for n, line in enumerate(raw, 1) if line.strip()]
    for i, (n, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            torn = i == len(numbered) - 1 and bool(raw[-1].strip())  # the last line, without its newline
            problems.append(f"line {n}: " + ("cut short (a run killed, or still writing it)" if torn else
                                            "not a JSON record"))
            continue
        why = _malformed(record)
        if why:
            problems.append(f"line {n}: {why}")
            continue
        (val if record.get("kind") == "val" else train).append(record)
    return train, val, problems


def _malformed(record) -> str | None:
    """Why a parsed line cannot be drawn (None: it can)."""
    if not isinstance(record, dict):
        return f"expected a JSON object, found {type(record).__name__}"
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return f"expected an integer \"step\", found {step!r:.40}"
    bad = [k for k in PLOTTED if k in record and (isinstance(record[k], bool) or not isinstance(record[k], (int, float)))]
    if bad:
        return f"expected a number for {bad[0]!r}, found {record[bad[0]]!r:.40}"
    if record.get("kind") == "val" and "CIDEr" not in record:
        return "a validation record without \"CIDEr\""
    return None


def read_log(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(train records, validation records) of a ``log.jsonl``; a last line cut short by a kill
    (catcap.training.runlog) is skipped, any other bad line is a ValueError naming it."""
    train, val, problems = scan_log(path)
    damaged = [p for p in problems if "cut short" not in p]
    if damaged:
        raise ValueError(f"{path}, {damaged[0]}; the log is damaged")
    return train, val


@dataclass
class Drawn:
    """What :func:`draw_training_log` wrote: ``path`` (``incomplete.png`` when the log had bad
    lines), the ``problems`` of those lines, and ``kept``: the picture left as it was."""

    path: Path
    problems: list[str] = field(default_factory=list)
    kept: Path | None = None


def incomplete_name(path: Path) -> Path:
    """Where a picture of an incomplete log goes: ``training.png`` -> ``training.incomplete.png``."""
    return path.with_name(f"{path.stem}.incomplete{path.suffix}")


def plot_if_logged(run_dir) -> Path | None:
    """``run_dir/training.png`` after a run, or None when the run logged nothing to draw (e.g.
    ``train.max_steps`` below ``train.log_every`` and no validation): a short run is no error."""
    log = Path(run_dir) / "log.jsonl"
    if not log.exists() or not any(scan_log(log)[:2]):
        return None
    return plot_training_log(run_dir)


def plot_training_log(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Plot ``run_dir/log.jsonl`` into ``out`` (default ``run_dir/training.png``; .png, .svg or
    .pdf); from a log with bad lines into :func:`incomplete_name` of it. Returns the path written."""
    return draw_training_log(run_dir, out).path


def draw_training_log(run_dir: str | Path, out: str | Path | None = None) -> Drawn:
    """:func:`plot_training_log`, returning the bad lines of the log too."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    run_dir = Path(run_dir)
    path = Path(out) if out else run_dir / "training.png"
    if path.suffix.lower() not in PICTURE_SUFFIXES:
        raise ValueError(f"cannot write a plot to {path}: expected a file name ending in "
                         f"{', '.join(PICTURE_SUFFIXES)}, found {path.suffix or 'no suffix'}")
    log = run_dir / "log.jsonl"
    if not log.exists():
        raise ValueError(f"no training log at {log}; expected the out_dir of a `catcap train` run")
    train, val, problems = scan_log(log)
    if not train and not val:
        why = f" ({'; '.join(problems[:3])})" if problems else ""
        raise ValueError(f"{log} has no {'well-formed ' if problems else ''}records{why}; expected JSON records of "
                         "`catcap train`; plot again after some training steps")
    drawn = Drawn(incomplete_name(path) if problems else path, problems, path if problems else None)
    scst = [r for r in train if r.get("phase") == "scst"]
    xe = [r for r in train if r.get("phase", "xe") == "xe"]
    panels = 2 + (len(SCST_PANELS) if scst else 0)
    fig = Figure(figsize=(9, 2.3 * panels), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(panels, 1, sharex=False)
    with_awc = any("awc" in r for r in xe)
    pretraining = any("mlm" in r for r in xe)  # VLP's masked-token pre-training (train.mlm)
    _line(axes[0], xe, "loss", "masked-token loss" if pretraining else "XE + AWC loss" if with_awc else "XE loss")
    if with_awc:  # without AWC the XE part is the loss itself: one line
        _line(axes[0], xe, "xe", "XE part")
        _line(axes[0], xe, "awc", "AWC term")
    _line(axes[0], scst, "loss", "SCST policy loss")
    axes[0].set_title("training loss per logged step")
    for phase, marker in (("start", "*"), ("xe", "o"), ("scst", "s")):  # start: SCST's init_from weights
        rows = [r for r in val if r.get("phase", "xe") == phase]
        if rows:
            axes[1].plot([r["step"] for r in rows], [r["CIDEr"] for r in rows], marker=marker, label=f"val CIDEr-D ({phase})")
    axes[1].set_title("validation CIDEr-D per epoch (x = training step)")
    for ax, keys in zip(axes[2:], SCST_PANELS):
        for key in keys:  # dashed baseline: with the 'mean' baseline it equals the reward, drawn over it
            _line(ax, scst, key, key.replace("_", " "), "--" if key == "baseline" else "-")
        ax.set_title("SCST: " + ", ".join(k.replace("_", " ") for k in keys) + " per logged step")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    axes[-1].set_xlabel("training step")
    fig.suptitle(f"{run_dir}")
    with atomic_write(drawn.path, "wb") as f:
        fig.savefig(f, format=path.suffix[1:].lower(), dpi=100)
    return drawn


def _line(ax, rows: list[dict], key: str, label: str, style: str = "-") -> None:
    points = [(r["step"], r[key]) for r in rows if key in r]
    if points:
        ax.plot(*zip(*points), style, label=label, linewidth=1.2)
