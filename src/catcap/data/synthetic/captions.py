"""The caption grammar: five different, true sentences per scene.

Five sentence families, each with synonyms and optional parts, so that the captions of one
image overlap (same objects, colours, relations) but differ, like COCO's:

* listing:   "There are two blue squares and a small red circle on a dark background."
* counting:  "Three shapes.", "Two squares and a ball.", "Two blue shapes and a red one."
* relation:  "A small red circle to the left of two blue squares.", "A star between two boxes."
* location:  "A green triangle in the top left corner."
* single:    "A single large yellow star on a grainy background."  (one-object scenes)

Every statement is exact for the scene (see :mod:`.grammar`): counts are whole groups, sizes
are the object's size class, relations hold for all pairs along the dominant axis.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from catcap.metrics.tokenizer import ptb_tokenize

from .grammar import (COUNT_WORDS, NOUNS, RELATION_MARGIN, RELATION_WORDS, SIZE_WORDS, article,
                      groups, location, pick, plural, relation)
from .scenes import Scene, SceneObject

__all__ = ["caption_scene", "finish", "mention", "tokens"]

_LOCATIONS = {
    ("top", "left"): ("in the top left corner", "at the top left"),
    ("top", "right"): ("in the top right corner", "at the top right"),
    ("bottom", "left"): ("in the bottom left corner", "at the bottom left"),
    ("bottom", "right"): ("in the bottom right corner", "at the bottom right"),
    ("top", "center"): ("at the top", "at the top center"), ("top", None): ("at the top", "near the top"),
    ("bottom", "center"): ("at the bottom", "at the bottom center"),
    ("bottom", None): ("at the bottom", "near the bottom"),
    ("middle", "left"): ("on the left", "on the left side"), (None, "left"): ("on the left", "on the left side"),
    ("middle", "right"): ("on the right", "on the right side"),
    (None, "right"): ("on the right", "on the right side"),
    ("middle", "center"): ("in the middle", "in the center"),
    ("middle", None): ("near the middle",), (None, "center"): ("near the center",),
}
_TONES = {"light": ("light", "light gray", "pale"), "dark": ("dark", "dark gray", "dark grey")}
_TEXTURES = {"plain": ("plain", ""), "striped": ("striped",), "grainy": ("grainy", "noisy")}


def finish(text: str) -> str:
    """Capitalise and end with a period: the ``raw`` form of a caption."""
    return text[0].upper() + text[1:] + "."


def _with_article(words: list[str]) -> str:
    return " ".join([article(words[0])] + words)


def _words(group: Sequence[SceneObject], rng: np.random.Generator, size_p: float, color: bool):
    obj = group[0]
    words = []
    if len({o.size for o in group}) == 1 and rng.random() < size_p:
        words.append(pick(rng, SIZE_WORDS[obj.size]))
    if color:
        words.append(obj.color)
    noun = pick(rng, NOUNS[obj.shape])
    return words + [plural(noun) if len(group) > 1 else noun]


def mention(group: Sequence[SceneObject], rng: np.random.Generator, size_p: float = 0.4,
            color: bool = True) -> str:
    """A noun phrase for a whole group: "a small red circle", "two blue squares"."""
    words = _words(group, rng, size_p, color)
    return " ".join([COUNT_WORDS[len(group)]] + words) if len(group) > 1 else _with_article(words)


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _background(scene: Scene, rng: np.random.Generator) -> str:
    bg = scene.background
    words = [w for w in (pick(rng, _TEXTURES[bg.texture]), pick(rng, _TONES[bg.tone])) if w]
    return _with_article(words + ["background"])


def _maybe_bg(scene: Scene, rng: np.random.Generator, p: float = 0.3, prep: str = "on") -> str:
    return f" {prep} " + _background(scene, rng) if rng.random() < p else ""


def _listing(scene: Scene, rng: np.random.Generator) -> str:
    gs = groups(scene)
    order = [gs[i] for i in rng.permutation(len(gs))]
    if len(gs) > 1 and all(len(g) == 1 for g in gs) and rng.random() < 0.3:
        by_x = sorted(gs, key=lambda g: g[0].cx)
        if all(b[0].cx - a[0].cx > RELATION_MARGIN for a, b in zip(by_x, by_x[1:])):
            return "from left to right, " + _join([mention(g, rng) for g in by_x])
    body = _join([mention(g, rng) for g in order])
    verb = "is" if len(order[0]) == 1 else "are"
    prefix = pick(rng, ("", "", f"there {verb} ", "a picture of ", "an image with ", "a view of "))
    if rng.random() < 0.15:
        return _background(scene, rng) + " with " + body
    return prefix + body + _maybe_bg(scene, rng)


def _counting(scene: Scene, rng: np.random.Generator) -> str:
    n = len(scene.objects)
    if n == 1:
        words = _words(scene.objects, rng, 0.5, True)
        return f"{pick(rng, ('a single', 'one', 'only one'))} {' '.join(words)}" + _maybe_bg(scene, rng, 0.5)
    kind = rng.integers(3)
    if kind == 0:
        noun = pick(rng, ("objects", "shapes", "shapes", "colored shapes", "figures"))
        return f"{COUNT_WORDS[n]} {noun}" + _maybe_bg(scene, rng, 0.6)
    if kind == 1:
        by_shape = groups(scene, key=lambda o: o.shape)
        return _join([mention(g, rng, 0.2, color=False) for g in by_shape]) + _maybe_bg(scene, rng)
    by_color = groups(scene, key=lambda o: o.color)
    noun = pick(rng, ("shape", "object"))
    parts = [f"{COUNT_WORDS[len(g)]} {g[0].color} {noun}s" if len(g) > 1 else
             _with_article([g[0].color, noun]) for g in by_color]
    return _join(parts)


def _relation(scene: Scene, rng: np.random.Generator) -> Optional[str]:
    gs = groups(scene)
    pairs = [(a, b, rel) for a in gs for b in gs if a is not b and (rel := relation(a, b))]
    between = [(a, b) for a in gs for b in gs if len(a) == 1 and len(b) == 2
               and {relation(a, b[:1]), relation(a, b[1:])} in ({"left", "right"}, {"above", "below"})]
    if between and rng.random() < 0.3:
        a, b = between[int(rng.integers(len(between)))]
        return f"{mention(a, rng)} between {mention(b, rng)}"
    if not pairs:
        return None
    a, b, rel = pairs[int(rng.integers(len(pairs)))]
    verb = "is" if len(a) == 1 else "are"
    prefix = pick(rng, ("", "", "", f"there {verb} "))
    return f"{prefix}{mention(a, rng)} {pick(rng, RELATION_WORDS[rel])} {mention(b, rng)}"


def _location(scene: Scene, rng: np.random.Generator) -> Optional[str]:
    placed = [(g, location(g[0])) for g in groups(scene) if len(g) == 1 and location(g[0])]
    if not placed:
        return None
    group, where = placed[int(rng.integers(len(placed)))]
    text = f"{mention(group, rng, 0.5)} {pick(rng, _LOCATIONS[where])}"
    return text + _maybe_bg(scene, rng, 0.2, prep="against")


_FAMILIES = ((_listing, 0.3), (_counting, 0.2), (_relation, 0.3), (_location, 0.2))


def caption_scene(scene: Scene, rng: np.random.Generator, num: int = 5) -> list[str]:
    """``num`` different raw captions ("A red circle above a star.") of a scene."""
    funcs, weights = zip(*_FAMILIES)
    p = np.asarray(weights) / sum(weights)
    out: list[str] = []
    for _ in range(200):
        text = funcs[int(rng.choice(len(funcs), p=p))](scene, rng)
        if text and finish(text) not in out:
            out.append(finish(text))
            if len(out) == num:
                return out
    raise RuntimeError(f"could not find {num} different captions for a scene with "
                       f"{len(scene.objects)} objects; the grammar is too small for it")


def tokens(raw: str) -> list[str]:
    """The caption's tokens as the evaluation sees them (``ptb_tokenize``)."""
    return ptb_tokenize(raw)
