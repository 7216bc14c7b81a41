"""Region features that imitate a bottom-up detector (Faster R-CNN style, one vector per box).

For every region (each visible object, plus 0-2 distractors: a background patch or a part of
an object) a raw descriptor of D0 = 131 numbers is computed from the pixels and the box only,
never from the scene's labels:

* colour of the region's foreground pixels: mean and std of RGB (6), mean RGB of the box (3),
  foreground fraction of the box (1);
* the foreground mask inside the box, box-filtered to 8 x 8 (64): the shape;
* the box, downsampled to 4 x 4 RGB (48): colour layout;
* box geometry x1, y1, x2, y2, cx, cy, w, h, area (9): where it is.

It is mapped to F = feature_dim by a fixed random projection (seed :data:`PROJECTION_SEED`,
independent of the world's seed, so every world shares one "encoder"), then ReLU; a little
Gaussian noise is added to the descriptor first, so that equal objects differ slightly.
Regions are shuffled, so a model cannot read objects off a fixed slot: it has to attend.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image

from .render import Rendering

__all__ = ["PROJECTION_SEED", "RAW_DIM", "RegionFeatures", "raw_descriptor", "region_features"]

PROJECTION_SEED = 20230601
RAW_DIM = 131
_NOISE = 0.02


@dataclass(frozen=True)
class RegionFeatures:
    """features (R, F) float32, boxes (R, 4) float32, object_region[i] = row of object i,
    kinds[r] = "object" / "background" / "part"."""

    features: np.ndarray
    boxes: np.ndarray
    object_region: list[int]
    kinds: list[str]


@lru_cache(maxsize=8)
def _projection(feature_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """W (RAW_DIM, F), b (F,): the fixed 'encoder' weights."""
    rng = np.random.default_rng(PROJECTION_SEED)
    w = rng.normal(0.0, 1.0 / np.sqrt(RAW_DIM), size=(RAW_DIM, feature_dim)).astype(np.float32)
    b = rng.normal(0.0, 0.1, size=feature_dim).astype(np.float32)
    return w, b


def _resize(a: np.ndarray, n: int) -> np.ndarray:
    """(h, w[, 3]) uint8 -> (n, n[, 3]) float32 in [0, 1], box filter."""
    return np.asarray(Image.fromarray(a).resize((n, n), Image.Resampling.BOX), np.float32) / 255.0


def _pixel_box(box: np.ndarray, size: int) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = (int(round(float(v) * size)) for v in box)
    return x1, y1, max(x2, x1 + 1), max(y2, y1 + 1)


def raw_descriptor(image: np.ndarray, fg: np.ndarray, box: np.ndarray) -> np.ndarray:
    """(RAW_DIM,) float32 descriptor of one region: image (S, S, 3) uint8, fg (S, S) bool."""
    x1, y1, x2, y2 = _pixel_box(box, image.shape[0])
    crop, mask = image[y1:y2, x1:x2], fg[y1:y2, x1:x2]
    pix = crop[mask] if mask.any() else crop.reshape(-1, 3)
    color = np.concatenate([pix.mean(0), pix.std(0), crop.reshape(-1, 3).mean(0)]) / 255.0
    shape = _resize(mask.astype(np.uint8) * 255, 8).ravel()
    layout = _resize(crop, 4).ravel()
    bx1, by1, bx2, by2 = (float(v) for v in box)
    w, h = bx2 - bx1, by2 - by1
    geometry = [bx1, by1, bx2, by2, (bx1 + bx2) / 2, (by1 + by2) / 2, w, h, w * h]
    parts = [3.0 * color, [mask.mean()], shape - 0.5, layout - 0.5, 2.0 * np.asarray(geometry)]
    return np.concatenate([np.ravel(p) for p in parts]).astype(np.float32)


def _distractor_box(rendering: Rendering, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """A background patch, or one half (left/right/top/bottom) of a random object's box."""
    if len(rendering.boxes) and rng.random() < 0.5:
        x1, y1, x2, y2 = (float(v) for v in rendering.boxes[int(rng.integers(len(rendering.boxes)))])
        half = int(rng.integers(4))
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        box = ((x1, y1, mx, y2), (mx, y1, x2, y2), (x1, y1, x2, my), (x1, my, x2, y2))[half]
        return np.array(box, np.float32), "part"
    w, h = rng.uniform(0.12, 0.35, size=2)
    x, y = rng.uniform(0, 1 - w), rng.uniform(0, 1 - h)
    return np.array([x, y, x + w, y + h], np.float32), "background"


def region_features(rendering: Rendering, num_distractors: int, feature_dim: int,
                    rng: np.random.Generator) -> RegionFeatures:
    """One feature row per visible object plus ``num_distractors`` rows, in shuffled order."""
    fg_all = rendering.masks.any(0)
    boxes, masks = list(rendering.boxes), list(rendering.masks)
    kinds = ["object"] * len(boxes)
    for _ in range(num_distractors):
        box, kind = _distractor_box(rendering, rng)
        boxes.append(box)
        masks.append(fg_all)
        kinds.append(kind)
    raw = np.stack([raw_descriptor(rendering.image, m, b) for b, m in zip(boxes, masks)])
    raw += rng.normal(0.0, _NOISE, size=raw.shape).astype(np.float32)
    w, b = _projection(feature_dim)
    feats = np.maximum(raw @ w + b, 0.0).astype(np.float32)
    order = rng.permutation(len(boxes))  # row r holds region order[r]
    row_of = np.argsort(order)
    n_obj = len(rendering.boxes)
    return RegionFeatures(feats[order], np.stack(boxes)[order].astype(np.float32),
                          [int(row_of[i]) for i in range(n_obj)], [kinds[i] for i in order])
