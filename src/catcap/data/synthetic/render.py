"""Rendering a scene with Pillow: the RGB image, one mask per object, ground-truth boxes.

Shapes are drawn as anti-aliased coverage masks (drawn at 4x and box-filtered down), then
composited over the background in scene order. Boxes are the tight boxes of the visible
pixels, normalised ``x1, y1, x2, y2`` in [0, 1]. Legend: S image side, M objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from .scenes import Background, Scene, SceneObject

__all__ = ["Rendering", "render_scene", "shape_polygon"]

_SUPERSAMPLE = 4


@dataclass(frozen=True)
class Rendering:
    """image (S, S, 3) uint8; masks (M, S, S) bool (visible pixels); boxes (M, 4) float32."""

    image: np.ndarray
    masks: np.ndarray
    boxes: np.ndarray


def _star(r: float) -> list[tuple[float, float]]:
    pts = []
    for k in range(10):
        rad = r if k % 2 == 0 else 0.45 * r
        a = -math.pi / 2 + k * math.pi / 5
        pts.append((rad * math.cos(a), rad * math.sin(a) + 0.1 * r))
    return pts


def _unit_outline(shape: str, r: float) -> list[tuple[float, float]]:
    """The outline of a shape of radius r around (0, 0), y down."""
    if shape == "circle":
        return [(r * math.cos(2 * math.pi * k / 48), r * math.sin(2 * math.pi * k / 48)) for k in range(48)]
    if shape == "square":
        s = 0.85 * r
        return [(-s, -s), (s, -s), (s, s), (-s, s)]
    if shape == "triangle":
        return [(0.0, -r), (r, 0.8 * r), (-r, 0.8 * r)]
    if shape == "star":
        return _star(r)
    if shape == "cross":
        a = 0.33 * r
        return [(-a, -r), (a, -r), (a, -a), (r, -a), (r, a), (a, a), (a, r), (-a, r), (-a, a),
                (-r, a), (-r, -a), (-a, -a)]
    if shape == "diamond":
        return [(0.0, -r), (0.75 * r, 0.0), (0.0, r), (-0.75 * r, 0.0)]
    raise ValueError(f"unknown shape {shape!r}; expected one of circle, square, triangle, star, "
                     "cross, diamond")


def shape_polygon(obj: SceneObject, side: float) -> list[tuple[float, float]]:
    """The object's outline in pixels of an image of the given side, rotated by obj.rotation."""
    c, s = math.cos(math.radians(obj.rotation)), math.sin(math.radians(obj.rotation))
    pts = _unit_outline(obj.shape, obj.r * side)
    return [(obj.cx * side + x * c - y * s, obj.cy * side + x * s + y * c) for x, y in pts]


def _background(bg: Background, size: int, rng: np.random.Generator) -> np.ndarray:
    """(S, S, 3) float32 background: flat tone plus faint stripes or grain."""
    img = np.broadcast_to(np.asarray(bg.rgb, np.float32), (size, size, 3)).copy()
    grain = {"plain": 2.0, "striped": 2.0, "grainy": 8.0}[bg.texture]
    img += rng.normal(0, grain, size=(size, size, 1)).astype(np.float32)
    if bg.texture == "striped":
        y, x = np.mgrid[0:size, 0:size].astype(np.float32) * (128.0 / size)
        a = math.radians(bg.angle)
        wave = np.sin(2 * math.pi * (x * math.cos(a) + y * math.sin(a)) / bg.period)
        img += 9.0 * wave[..., None]
    return img


def _window(obj: SceneObject, size: int) -> tuple[slice, slice]:
    """The pixel rows/columns that can hold the object (its circumscribed square + 1 px)."""
    lo = [max(0, int(math.floor((c - obj.r) * size)) - 1) for c in (obj.cy, obj.cx)]
    hi = [min(size, int(math.ceil((c + obj.r) * size)) + 1) for c in (obj.cy, obj.cx)]
    return slice(lo[0], hi[0]), slice(lo[1], hi[1])


def _coverage(obj: SceneObject, size: int, rows: slice, cols: slice) -> np.ndarray:
    """(h, w) float32 in [0, 1]: the fraction of each pixel of the window the shape covers."""
    k = _SUPERSAMPLE
    h, w = rows.stop - rows.start, cols.stop - cols.start
    big = Image.new("L", (w * k, h * k), 0)
    pts = [(x - cols.start * k, y - rows.start * k) for x, y in shape_polygon(obj, size * k)]
    ImageDraw.Draw(big).polygon(pts, fill=255)
    return np.asarray(big.resize((w, h), Image.Resampling.BOX), np.float32) / 255.0


def _box(mask: np.ndarray) -> np.ndarray:
    size = mask.shape[0]
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return np.zeros(4, np.float32)
    return np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32) / size


def render_scene(scene: Scene, size: int, rng: np.random.Generator) -> Rendering:
    """Draw the scene at size x size pixels; rng drives the background grain only."""
    img = _background(scene.background, size, rng)
    masks = np.zeros((len(scene.objects), size, size), bool)
    for i, obj in enumerate(scene.objects):
        rows, cols = _window(obj, size)
        alpha = _coverage(obj, size, rows, cols)[..., None]
        noise = rng.normal(0, 3, size=alpha.shape).astype(np.float32)
        img[rows, cols] = img[rows, cols] * (1 - alpha) + (np.asarray(obj.rgb, np.float32) + noise) * alpha
        covered = np.zeros((size, size), bool)
        covered[rows, cols] = alpha[..., 0] >= 0.5
        masks[:i] &= ~covered  # later objects hide earlier ones
        masks[i] = covered
    boxes = np.stack([_box(m) for m in masks]) if len(masks) else np.zeros((0, 4), np.float32)
    image = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return Rendering(image, masks, boxes.astype(np.float32))
