"""Scenes of the shapes world: 1-4 coloured shapes on a plain or lightly textured background.

A scene is pure data (no pixels): every object has a shape, a colour, a size class, a centre
and a radius in normalised image coordinates (0..1, y pointing down). :func:`sample_scene` is
a function of its random generator only, so a world is reproducible from its seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BACKGROUNDS", "COLORS", "SHAPES", "SIZES", "Background", "SceneObject", "Scene",
           "sample_scene"]

SHAPES = ("circle", "square", "triangle", "star", "cross", "diamond")
#: colour name -> RGB; object pixels are jittered around it.
COLORS = {
    "red": (220, 40, 40), "green": (40, 170, 60), "blue": (45, 80, 225), "yellow": (240, 215, 40),
    "purple": (140, 60, 190), "orange": (245, 140, 30), "white": (250, 250, 250), "black": (20, 20, 20),
}
#: size class -> range of the radius (half the side of the shape's square), image = 1.
SIZES = {"small": (0.075, 0.10), "large": (0.15, 0.185)}
#: background tone -> base grey level; textures: plain, striped, grainy.
BACKGROUNDS = {"light": 205, "dark": 70}
TEXTURES = ("plain", "striped", "grainy")
#: colours that do not stand out from a background tone
_LOW_CONTRAST = {"light": {"white", "yellow"}, "dark": {"black"}}
_NUM_OBJECTS_P = (0.2, 0.3, 0.3, 0.2)  # P(1..4 objects)


@dataclass(frozen=True)
class SceneObject:
    """One shape: centre (cx, cy) and radius r in image units, rotation in degrees."""

    shape: str
    color: str
    size: str
    cx: float
    cy: float
    r: float
    rotation: float = 0.0
    rgb: tuple = (0, 0, 0)


@dataclass(frozen=True)
class Background:
    """Tone ("light"/"dark"), texture ("plain"/"striped"/"grainy") and the texture's parameters."""

    tone: str
    texture: str
    rgb: tuple
    angle: float = 0.0
    period: float = 8.0


@dataclass(frozen=True)
class Scene:
    """Objects (drawn in this order), the background, and how many distractor regions to add."""

    objects: tuple[SceneObject, ...]
    background: Background
    num_distractors: int = 0


def _jitter(rgb, rng: np.random.Generator, amount: int) -> tuple:
    return tuple(int(np.clip(c + rng.integers(-amount, amount + 1), 0, 255)) for c in rgb)


def sample_background(rng: np.random.Generator) -> Background:
    tone = str(rng.choice(list(BACKGROUNDS)))
    base = BACKGROUNDS[tone]
    tint = rng.integers(-12, 13, size=3)
    rgb = tuple(int(np.clip(base + t, 0, 255)) for t in tint)
    return Background(tone, str(rng.choice(TEXTURES)), rgb, float(rng.uniform(0, 180)),
                      float(rng.uniform(6, 14)))


def _place(rng: np.random.Generator, r: float, placed: list[tuple[float, float, float]],
           tries: int = 60):
    """A centre for radius r inside the image, overlapping no placed object much (or None)."""
    for _ in range(tries):
        cx, cy = rng.uniform(r + 0.02, 1 - r - 0.02, size=2)
        if all(np.hypot(cx - x, cy - y) > 0.95 * (r + q) for x, y, q in placed):
            return float(cx), float(cy)
    return None


def _attributes(rng: np.random.Generator, n: int, colors: list[str]) -> list[tuple[str, str]]:
    """n (shape, colour) pairs; often repeats one, so counts ("two blue squares") occur."""
    pairs = []
    for i in range(n):
        if i > 0 and rng.random() < 0.3:
            shape, color = pairs[int(rng.integers(len(pairs)))]
            if rng.random() < 0.3:  # same shape, other colour (or the reverse)
                color = str(rng.choice(colors))
            elif rng.random() < 0.3:
                shape = str(rng.choice(SHAPES))
            pairs.append((shape, color))
        else:
            pairs.append((str(rng.choice(SHAPES)), str(rng.choice(colors))))
    return pairs


def sample_scene(rng: np.random.Generator) -> Scene:
    """A random scene: 1-4 non-overlapping objects, a background, 0-2 distractor regions."""
    background = sample_background(rng)
    colors = [c for c in COLORS if c not in _LOW_CONTRAST[background.tone]]
    n = int(rng.choice(4, p=_NUM_OBJECTS_P)) + 1
    objects, placed = [], []
    for shape, color in _attributes(rng, n, colors):
        size = str(rng.choice(list(SIZES), p=(0.6, 0.4)))
        r = float(rng.uniform(*SIZES[size]))
        spot = _place(rng, r, placed)
        if spot is None and size == "large":  # no room: try a small one instead
            size, r = "small", float(rng.uniform(*SIZES["small"]))
            spot = _place(rng, r, placed)
        if spot is None:
            continue
        placed.append((*spot, r))
        objects.append(SceneObject(shape, color, size, spot[0], spot[1], r,
                                   float(rng.uniform(-10, 10)), _jitter(COLORS[color], rng, 18)))
    return Scene(tuple(objects), background, int(rng.choice(3, p=(0.4, 0.4, 0.2))))
