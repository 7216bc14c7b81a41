"""Question/answer pairs about a scene, for visual question answering.

Question types (``type`` field) and their one-word answers:

* ``color``    "what color is the circle?" -> "red"          (only if there is one circle)
* ``shape``    "what shape is the red object?" -> "circle"    (only if one red object)
* ``size``     "what size is the star?" -> "small"/"large"    (only if one star)
* ``count``    "how many squares are there?" -> "two" (or "zero" for an absent shape),
               "how many blue objects are there?", "how many objects are there?"
* ``exists``   "is there a green triangle?" -> "yes"/"no" (one present and one absent pair)
* ``relation`` "is the red circle to the left of the blue square?" -> "yes"/"no"
               (two single objects whose relation is clear; asked true or reversed)

Answers are canonical words (shape names, not synonyms), so they form a small answer set.
"""

from __future__ import annotations

import numpy as np

from .grammar import COUNT_WORDS, groups, pick, plural, relation
from .scenes import COLORS, SHAPES, Scene

__all__ = ["QUESTION_TYPES", "ask_scene"]

QUESTION_TYPES = ("color", "shape", "size", "count", "exists", "relation")
_RELATION_Q = {"left": "to the left of", "right": "to the right of", "above": "above", "below": "below"}
_OPPOSITE = {"left": "right", "right": "left", "above": "below", "below": "above"}


def _qa(kind: str, question: str, answer: str) -> dict:
    return {"question": question, "answer": answer, "type": kind}


def _attribute_questions(scene: Scene) -> list[dict]:
    out = []
    for g in groups(scene, key=lambda o: o.shape):
        if len(g) == 1:
            out.append(_qa("color", f"what color is the {g[0].shape}?", g[0].color))
            out.append(_qa("size", f"what size is the {g[0].shape}?", g[0].size))
    for g in groups(scene, key=lambda o: o.color):
        if len(g) == 1:
            out.append(_qa("shape", f"what shape is the {g[0].color} object?", g[0].shape))
    return out


def _count_questions(scene: Scene, rng: np.random.Generator) -> list[dict]:
    shapes = [o.shape for o in scene.objects]
    absent = [s for s in SHAPES if s not in shapes]
    asked = sorted(set(shapes)) + ([pick(rng, absent)] if absent else [])
    out = [_qa("count", f"how many {plural(s)} are there?", COUNT_WORDS[shapes.count(s)]) for s in asked]
    colors = [o.color for o in scene.objects]
    c = pick(rng, sorted(set(colors)))
    out.append(_qa("count", f"how many {c} objects are there?", COUNT_WORDS[colors.count(c)]))
    out.append(_qa("count", "how many objects are there?", COUNT_WORDS[len(scene.objects)]))
    return out


def _exists_questions(scene: Scene, rng: np.random.Generator) -> list[dict]:
    present = sorted({(o.color, o.shape) for o in scene.objects})
    color, shape = present[int(rng.integers(len(present)))]
    out = [_qa("exists", f"is there {_a(color)} {color} {shape}?", "yes")]
    for _ in range(20):  # an absent pair that shares the colour or the shape: a hard "no"
        if rng.random() < 0.5:
            color = pick(rng, list(COLORS))
        else:
            shape = pick(rng, SHAPES)
        if (color, shape) not in present:
            out.append(_qa("exists", f"is there {_a(color)} {color} {shape}?", "no"))
            break
    return out


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _relation_questions(scene: Scene, rng: np.random.Generator) -> list[dict]:
    single = [g for g in groups(scene) if len(g) == 1]
    pairs = [(a[0], b[0], rel) for a in single for b in single if a is not b and (rel := relation(a, b))]
    if not pairs:
        return []
    a, b, rel = pairs[int(rng.integers(len(pairs)))]
    truth = rng.random() < 0.5
    asked = rel if truth else _OPPOSITE[rel]
    q = f"is the {a.color} {a.shape} {_RELATION_Q[asked]} the {b.color} {b.shape}?"
    return [_qa("relation", q, "yes" if truth else "no")]


def ask_scene(scene: Scene, rng: np.random.Generator) -> list[dict]:
    """All question/answer pairs of a scene: ``[{"question", "answer", "type"}]``."""
    return (_attribute_questions(scene) + _count_questions(scene, rng)
            + _exists_questions(scene, rng) + _relation_questions(scene, rng))
