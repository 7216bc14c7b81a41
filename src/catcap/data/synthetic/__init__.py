"""The built-in "shapes" world: a procedural captioning dataset that trains in minutes on a CPU.

``make_world(out_dir)`` writes images, a Karpathy-format caption file (with objects and
question/answer pairs) and a region-feature file, exactly like a real dataset. Modules:
``scenes`` (sampling), ``render`` (Pillow), ``grammar`` + ``captions`` (sentences), ``qa``
(questions), ``regions`` (detector-like features), ``world`` (``make_world``).
See ``docs/synthetic-world.md``.
"""

from .world import WorldPaths, make_world

__all__ = ["WorldPaths", "make_world"]
