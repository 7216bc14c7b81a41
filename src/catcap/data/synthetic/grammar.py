"""Words and scene facts shared by the caption grammar and the questions.

Everything here is exact with respect to the scene: a group is *all* objects of one
(shape, colour), so "two blue squares" means exactly two; a relation holds for every pair of
objects of the two groups, along the axis on which their centres differ most, by a margin.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from .scenes import Scene, SceneObject

__all__ = ["COUNT_WORDS", "NOUNS", "PLURALS", "RELATION_WORDS", "SIZE_WORDS", "WORD_TO_SHAPE",
           "article", "groups", "location", "plural", "relation"]

#: shape -> its nouns (first = canonical, listed more often)
NOUNS = {
    "circle": ("circle", "circle", "ball", "disc"), "square": ("square", "square", "box", "block"),
    "triangle": ("triangle",), "star": ("star",), "cross": ("cross",),
    "diamond": ("diamond", "diamond", "rhombus"),
}
PLURALS = {"box": "boxes", "cross": "crosses", "rhombus": "rhombuses"}
WORD_TO_SHAPE = {w: s for s, ws in NOUNS.items() for w in ws} | {
    PLURALS.get(w, w + "s"): s for s, ws in NOUNS.items() for w in ws}
SIZE_WORDS = {"small": ("small", "small", "little", "tiny"), "large": ("large", "large", "big")}
COUNT_WORDS = ("zero", "one", "two", "three", "four", "five", "six")
#: relation of A to B -> phrases ("A to the left of B")
RELATION_WORDS = {
    "left": ("to the left of", "to the left of", "left of", "on the left of"),
    "right": ("to the right of", "to the right of", "right of", "on the right of"),
    "above": ("above", "above", "over"),
    "below": ("below", "below", "under", "beneath"),
}
RELATION_MARGIN = 0.1  # centres must differ by this much (image = 1) along the relation's axis


def plural(noun: str) -> str:
    return PLURALS.get(noun, noun + "s")


def article(next_word: str) -> str:
    return "an" if next_word[:1] in "aeiou" else "a"


def pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


def groups(scene: Scene, key=lambda o: (o.shape, o.color)) -> list[list[SceneObject]]:
    """Objects grouped by key, groups in order of first appearance."""
    out: dict = {}
    for obj in scene.objects:
        out.setdefault(key(obj), []).append(obj)
    return list(out.values())


def _pair_relation(a: SceneObject, b: SceneObject) -> Optional[str]:
    dx, dy = b.cx - a.cx, b.cy - a.cy
    if abs(dx) >= abs(dy) and abs(dx) > RELATION_MARGIN:
        return "left" if dx > 0 else "right"
    if abs(dy) > abs(dx) and abs(dy) > RELATION_MARGIN:
        return "above" if dy > 0 else "below"
    return None


def relation(a: Sequence[SceneObject], b: Sequence[SceneObject]) -> Optional[str]:
    """"left"/"right"/"above"/"below" if it holds for every (a_i, b_j), else None (A rel B)."""
    found = {_pair_relation(x, y) for x in a for y in b}
    return found.pop() if len(found) == 1 and None not in found else None


def _third(v: float) -> Optional[int]:
    """0/1/2 for a coordinate clearly in the first/middle/last third, None near a border."""
    if v < 0.3:
        return 0
    if 0.4 < v < 0.6:
        return 1
    if v > 0.7:
        return 2
    return None


def location(obj: SceneObject) -> Optional[tuple[Optional[str], Optional[str]]]:
    """(row, column) words such as ("top", "left"), ("middle", None); None if both unclear."""
    row, col = _third(obj.cy), _third(obj.cx)
    if row is None and col is None:
        return None
    return (None if row is None else ("top", "middle", "bottom")[row],
            None if col is None else ("left", "center", "right")[col])
