"""Pictures of the history analysis (:mod:`catcap.viz.history`), written as PNG files.

* :func:`plot_history_weight`: total history weight per word position, one line per
  checkpoint (the paper's Fig. 5, top panel), with the number of images still generating at
  each position underneath (the tail of the curve averages few images);
* :func:`plot_image_attention`: one image, one panel per generated token: the image with the
  region boxes lit and outlined by their attention weight (grid cells for grid features, a
  bar chart when there is no picture or no boxes), and a bar per history entry labelled with
  the word it came from.

matplotlib is used through :class:`matplotlib.figure.Figure` and the Agg canvas only (no
pyplot, no display, no global backend switch). Install it with ``pip install catcap[viz]``.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np

try:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib import colormaps
except ImportError as err:  # pragma: no cover - exercised only without matplotlib
    raise ImportError("catcap's plots need matplotlib, which is not installed; install it with "
                      "`pip install 'catcap[viz]'` (or `pip install matplotlib`)") from err

from catcap.atomic import atomic_write
from catcap.viz.history import HistoryCurve, ImageAttention

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _save(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    path = Path(path)
    FigureCanvasAgg(fig)
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    return path


def _layer_name(layer: int, num_layers: int) -> str:
    top = " (top)" if layer == num_layers - 1 else " (bottom)" if layer == 0 else ""
    return f"decoder layer {layer + 1} of {num_layers}{top}"


# -- (a) history weight per word position -------------------------------------------------------

# a legend of more entries than this goes under the plots, where it cannot cover a curve
LEGEND_INSIDE = 3


def plot_history_weight(curves: Sequence[HistoryCurve], path: str | Path, title: str | None = None) -> Path:
    """Line plot of the mean history weight per word position, one line per curve; a dotted
    line marks a checkpoint's AWC target (its beta averaged over heads) when it has one."""
    return _save(history_weight_figure(curves, title), path)


def history_weight_figure(curves: Sequence[HistoryCurve], title: str | None = None) -> Figure:
    """The figure :func:`plot_history_weight` saves. Its legend sits inside the top panel for up
    to LEGEND_INSIDE entries and below both panels for more (the figure grows to hold it)."""
    if not curves:
        raise ValueError("plot_history_weight needs at least one HistoryCurve, got none")
    fig = Figure(figsize=(8.5, 6.2))
    grid = fig.add_gridspec(2, 1, height_ratios=[3.2, 1.0], hspace=0.08)
    ax = fig.add_subplot(grid[0])
    low = fig.add_subplot(grid[1], sharex=ax)
    longest = max(len(c.mean) for c in curves)
    top = 0.0
    for i, c in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        ax.plot(c.positions, c.mean, marker="o", markersize=4, linewidth=2, color=color,
                label=f"{c.label}  (mean over all words {c.overall:.3f})")
        top = max(top, max(c.mean, default=0.0))
        if c.beta:
            beta = float(np.mean(c.beta))
            ax.axhline(beta, color=color, linestyle=":", linewidth=1.3,
                       label=f"{c.label}: learned AWC target β = {beta:.3f} (mean over heads)")
            top = max(top, beta)
        low.step(c.positions, c.counts, where="mid", color=color, linewidth=1.5)
    ax.set_ylim(0.0, min(1.0, max(top * 1.18, 0.05)))
    ax.set_xlim(0.5, longest + 0.5)
    ax.set_ylabel("mean history weight $a_t$\n(attention on history, head average)")
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    below = 0.0 if len(handles) <= LEGEND_INSIDE else 0.3 + 0.2 * len(handles)  # inches under the panels
    if below:
        fig.set_size_inches(8.5, 6.2 + below)
    else:
        ax.legend(loc="best", fontsize=8.5, framealpha=0.9)
    ax.tick_params(labelbottom=False)
    first = curves[0]
    eos = " incl. the <eos> step" if first.include_eos else ", words only"
    ax.set_title(title or (f"Total attention on the historical context memory per word position\n"
                           f"{_layer_name(first.layer, first.num_layers)}, greedy captions of {first.images} "
                           f"'{first.split}' images{eos}"), fontsize=11)
    low.set_ylabel("images still\ngenerating", fontsize=9)
    low.set_xlabel("word position t in the generated caption")
    low.set_ylim(0, max(max(c.counts, default=0) for c in curves) * 1.1 + 1)
    low.grid(True, alpha=0.3)
    step = max(1, math.ceil(longest / 20))
    low.set_xticks(range(1, longest + 1, step))
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.12, right=0.97, top=1 - 0.62 / height, bottom=(0.56 + below) / height)
    if below:
        fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.12, 0.01), fontsize=8.5, frameon=False)
    return fig


# -- (b) one image, one panel per word ------------------------------------------------------------

def _load_image(path: Path | None) -> np.ndarray | None:
    if path is None:
        return None
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0


def _square_side(n: int) -> int | None:
    side = math.isqrt(n)
    return side if side >= 2 and side * side == n else None


def _region_boxes(att: ImageAttention, n: int) -> tuple[np.ndarray | None, str]:
    """Boxes (N, 4) normalised, and how regions are shown: ``boxes``, ``grid`` or ``bars``."""
    if att.boxes is not None and len(att.boxes) == n and np.ptp(att.boxes) > 0:
        boxes = np.asarray(att.boxes, dtype=np.float64)
        return boxes, "boxes"
    side = _square_side(n)
    if side is not None:  # grid features: row-major cells
        cells = [(c / side, r / side, (c + 1) / side, (r + 1) / side) for r in range(side) for c in range(side)]
        return np.asarray(cells), "grid"
    return None, "bars"


def _draw_regions(ax, image: np.ndarray, boxes: np.ndarray, weights: np.ndarray, vmax: float, label_all: bool) -> None:
    """Image dimmed outside attention: each pixel is lit by the summed weight of the boxes
    covering it (relative to the largest region weight of the figure); boxes outlined."""
    h, w = image.shape[:2]
    scale = np.array([w, h, w, h]) if boxes.max() <= 1.5 else np.ones(4)  # normalised or pixel boxes
    px = np.clip(np.round(boxes * scale), 0, [w, h, w, h]).astype(int)
    heat = np.zeros((h, w))
    for (x1, y1, x2, y2), a in zip(px, weights):
        heat[y1:max(y2, y1 + 1), x1:max(x2, x1 + 1)] += a
    light = 0.4 + 0.6 * np.clip(heat / vmax, 0.0, 1.0)
    ax.imshow(image * light[..., None], interpolation="nearest")
    cmap = colormaps["plasma"]
    for i in np.argsort(weights):  # strongest drawn last, on top
        x1, y1, x2, y2 = px[i]
        rel = float(np.clip(weights[i] / vmax, 0.0, 1.0))
        ax.add_patch(Rectangle((x1 - 0.5, y1 - 0.5), max(x2 - x1, 1), max(y2 - y1, 1), fill=False,
                               edgecolor=cmap(0.15 + 0.8 * rel), linewidth=0.6 + 2.4 * rel))
        if label_all or rel >= 0.2:
            ax.text(x1 + 1, y1 + 1, f"{weights[i]:.2f}", fontsize=6.5, color="white", va="top", ha="left",
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "black", "alpha": 0.6, "linewidth": 0})
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)


def _draw_intro(ax, below, image: np.ndarray, boxes: np.ndarray, references: list[str]) -> None:
    """The image as it is, every region outlined and numbered; the references underneath."""
    h, w = image.shape[:2]
    scale = np.array([w, h, w, h]) if boxes.max() <= 1.5 else np.ones(4)
    ax.imshow(image, interpolation="nearest")
    for i, (x1, y1, x2, y2) in enumerate(np.clip(np.round(boxes * scale), 0, [w, h, w, h])):
        ax.add_patch(Rectangle((x1 - 0.5, y1 - 0.5), max(x2 - x1, 1), max(y2 - y1, 1), fill=False,
                               edgecolor="#00e5ff", linewidth=1.0, linestyle="--"))
        ax.text(x2 - 1, y2 - 1, f"r{i + 1}", fontsize=6.5, color="black", va="bottom", ha="right",
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "#00e5ff", "alpha": 0.8, "linewidth": 0})
    ax.set_title(f"the image, {len(boxes)} regions", fontsize=9)
    ax.set_xlim(-0.5, w - 0.5)
    ax.set_ylim(h - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    below.axis("off")
    if references:
        text = "\n".join(textwrap.shorten(r, 48, placeholder="...") for r in references[:4])
        below.text(0.0, 1.0, "references:\n" + text, fontsize=6.5, va="top", ha="left", transform=below.transAxes)


def _draw_region_bars(ax, weights: np.ndarray, vmax: float) -> None:
    """Region weights as bars, named r1..rN above the bars (the panel below has no room for ticks)."""
    n = len(weights)
    ax.bar(range(n), weights, color=colormaps["plasma"](0.15 + 0.8 * np.clip(weights / vmax, 0, 1)))
    ax.set_ylim(0, vmax * 1.3)
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_xticks([])
    if n <= 12:
        for i, w in enumerate(weights):
            ax.text(i, w, f"r{i + 1}\n{w:.2f}", ha="center", va="bottom", fontsize=5.5)
    else:
        ax.text(0.01, 0.98, f"regions r1..r{n}, left to right", ha="left", va="top", fontsize=6,
                transform=ax.transAxes)
    ax.tick_params(axis="y", labelsize=6)
    ax.set_ylabel("region weight", fontsize=7)


def _draw_history(ax, weights: np.ndarray, labels: list[str], vmax: float, own_entry: bool) -> None:
    n = len(weights)
    if n == 0:
        ax.text(0.5, 0.5, "no history entries yet", ha="center", va="center", fontsize=7, transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    colors = ["#1f77b4"] * n
    if own_entry:
        colors[-1] = "#ff7f0e"  # CACA (chc) / OHC: the current step's own entry
    ax.bar(range(n), weights, color=colors, width=0.8)
    if n <= 8:
        for i, w in enumerate(weights):
            if w >= 0.01:
                ax.text(i, w, f"{w:.2f}", ha="center", va="bottom", fontsize=5.5)
    ax.set_ylim(0, vmax * 1.22)
    ax.set_xlim(-0.6, max(n, 4) - 0.4)
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=6.5 if n <= 12 else 5.5)
    ax.tick_params(axis="y", labelsize=6)
    ax.tick_params(axis="x", length=0, pad=1)
    ax.grid(True, axis="y", alpha=0.3)


def plot_image_attention(att: ImageAttention, path: str | Path, title: str | None = None, columns: int = 5) -> Path:
    """One panel per generated token: regions (image + boxes, grid cells, or bars) lit by the
    token's final-pass attention, and its attention on each history entry."""
    t = len(att.tokens)
    if t == 0:
        raise ValueError(f"image {att.key}: the model generated no token, nothing to plot")
    image = _load_image(att.image_path)
    regions = att.region_attention
    n = 0 if regions is None else regions.shape[1]
    boxes, mode = _region_boxes(att, n) if n else (None, "none")
    if image is None and mode == "boxes":
        mode = "bars"
    if image is None and mode == "grid":
        mode = "heatmap"
    intro = mode in ("boxes", "grid")  # a first panel with the undimmed image and its regions
    cells = t + intro
    cols = max(1, min(cells, columns))
    rows = math.ceil(cells / cols)
    width, row_height, head = 3.0 * cols, 4.3, 1.25
    fig = Figure(figsize=(width, row_height * rows + head))
    height = row_height * rows + head
    outer = fig.add_gridspec(rows, cols, hspace=0.42, wspace=0.22, left=0.045, right=0.99,
                             bottom=0.75 / height, top=1 - head / height)
    vmax_region = float(regions.max()) if n else 1.0
    vmax_region = max(vmax_region, 1e-6)
    vmax_hist = max([float(h.max()) for h in att.history_attention if len(h)] + [1e-6])
    own = att.strategy in ("chc", "ohc")
    if intro:
        cell = outer[0, 0].subgridspec(2, 1, height_ratios=[3.0, 1.25], hspace=0.06)
        _draw_intro(fig.add_subplot(cell[0]), fig.add_subplot(cell[1]), image, boxes, att.references)
    for k, token in enumerate(att.tokens):
        r, c = divmod(k + intro, cols)
        cell = outer[r, c].subgridspec(2, 1, height_ratios=[3.0, 1.25], hspace=0.06)
        top = fig.add_subplot(cell[0])
        bottom = fig.add_subplot(cell[1])
        a = float(att.history_weight[k])
        top.set_title(f"{k + 1}. \u201c{token}\u201d\nhistory {a:.2f} \u00b7 regions {1 - a:.2f}", fontsize=9)
        if mode in ("boxes", "grid"):
            _draw_regions(top, image, boxes, regions[k], vmax_region, label_all=n <= 8)
            top.set_xticks([])
            top.set_yticks([])
        elif mode == "heatmap":
            side = _square_side(n)
            top.imshow(regions[k].reshape(side, side), cmap="plasma", vmin=0, vmax=vmax_region)
            top.set_xticks([])
            top.set_yticks([])
        elif mode == "bars":
            _draw_region_bars(top, regions[k], vmax_region)
        else:
            if image is not None:
                top.imshow(image * 0.35)
            top.text(0.5, 0.5, "no regions in the final pass\n(ohc strategy)", ha="center", va="center",
                     fontsize=7, color="white" if image is not None else "black", transform=top.transAxes)
            top.set_xticks([])
            top.set_yticks([])
        _draw_history(bottom, att.history_attention[k], att.history_labels[k], vmax_hist, own)
        if c == 0 or (k == 0 and intro):
            bottom.set_ylabel("history\nentry weight", fontsize=7)
    shown = {"boxes": "each region box lit and outlined by its attention weight (number = weight)",
             "grid": "grid cells lit by their attention weight", "heatmap": "grid cells coloured by attention weight",
             "bars": "bars = weight of each region", "none": "no region attention"}[mode]
    own_text = " (orange = the step's own entry)" if own else ""
    chars = max(40, int(width * 13))
    lines = [f"{att.label}, image {att.key}: \u201c{att.caption}\u201d",
             f"{_layer_name(att.layer, att.num_layers)}, final-pass attention averaged over heads.",
             f"Top: {shown}. Bottom: weight on each history entry, labelled with the word that step "
             f"read{own_text}."]
    text = "\n".join(textwrap.fill(line, chars) for line in lines)
    fig.suptitle(title or text, fontsize=9.5, y=1 - 0.12 / height, va="top")
    return _save(fig, path)
