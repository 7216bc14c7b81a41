"""A picture of a training run from its ``log.jsonl``: losses, validation CIDEr-D and, for
self-critical training, reward / baseline / entropy / length / ``<eos>`` fraction per step —
what makes an SCST collapse (reward up while entropy and length fall, captions stop ending
with ``<eos>``) visible at a glance.

``plot_training_log(run_dir)`` writes ``run_dir/training.png`` (matplotlib, Agg backend).
"""

from __future__ import annotations

import json
from pathlib import Path

from catcap.atomic import atomic_write

PICTURE_SUFFIXES = (".png", ".svg", ".pdf")
SCST_PANELS = (("reward", "baseline", "greedy_reward"), ("advantage_std",), ("entropy",), ("length",), ("eos_fraction",))


def read_log(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(train records, validation records) of a ``log.jsonl``."""
    train, val = [], []
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, line in enumerate(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # a line cut short by a kill (catcap.training.runlog): not written yet
                continue
            raise ValueError(f"{path}, line {i + 1}: not a JSON record; the log is damaged") from None
        (val if record.get("kind") == "val" else train).append(record)
    return train, val


def plot_if_logged(run_dir) -> Path | None:
    """``run_dir/training.png`` after a run, or None when the run logged nothing to draw (e.g.
    ``train.max_steps`` below ``train.log_every`` and no validation): a short run is no error."""
    log = Path(run_dir) / "log.jsonl"
    if not log.exists() or not any(read_log(log)):
        return None
    return plot_training_log(run_dir)


def plot_training_log(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Plot ``run_dir/log.jsonl`` into ``out`` (default ``run_dir/training.png``; .png, .svg or .pdf)."""
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
    train, val = read_log(log)
    if not train and not val:
        raise ValueError(f"{log} has no records yet; plot again after some training steps")
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
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=path.suffix[1:].lower(), dpi=100)
    return path


def _line(ax, rows: list[dict], key: str, label: str, style: str = "-") -> None:
    points = [(r["step"], r[key]) for r in rows if key in r]
    if points:
        ax.plot(*zip(*points), style, label=label, linewidth=1.2)
