"""Explicit decoding state: everything a decoder needs between steps, reorderable.

Rows are image-major groups: row ``b * group + g`` is hypothesis ``g`` of image ``b``
(group = 1 for greedy, the beam size for beam search, n for n samples per image).
``memory`` is per image (B rows) and is never copied per hypothesis; ``caches`` are per
hypothesis (B * group rows) and are what :meth:`DecoderState.reorder` permutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor

from catcap.models.attention import KeyValue


def select_rows(tree: Any, index: Tensor) -> Any:
    """Apply ``index_select(0, index)`` to every tensor / KeyValue in a nested structure."""
    if tree is None:
        return None
    if isinstance(tree, Tensor):
        return tree.index_select(0, index)
    if isinstance(tree, KeyValue) or hasattr(tree, "index_select"):  # KeyValue, HistoricalContextMemory, ...
        return tree.index_select(index)
    if isinstance(tree, dict):
        return {k: select_rows(v, index) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(select_rows(v, index) for v in tree)
    raise TypeError(f"cannot reorder a {type(tree).__name__} in a decoder cache; use tensors, lists, dicts "
                    "or objects with an index_select(index) method")


def reserve_rows(tree: Any, capacity: int) -> Any:
    """Every decoding memory in a nested structure (objects with ``reserve(capacity)``, e.g.
    :class:`~catcap.models.cross.memory.KeyValueMemory`) made to allocate room for
    ``capacity`` entries at its first write and never grow; anything else unchanged."""
    if isinstance(tree, dict):
        return {k: reserve_rows(v, capacity) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(reserve_rows(v, capacity) for v in tree)
    return tree.reserve(capacity) if hasattr(tree, "reserve") else tree


@dataclass
class DecoderState:
    """memory: per-image prepared encoder output (whatever the decoder prepared, B rows);
    memory_mask: (B, N) bool, True = real region; group: hypotheses per image;
    position: tokens consumed so far; caches: per-hypothesis caches (B * group rows)."""

    memory: Any
    memory_mask: Tensor
    group: int
    position: int = 0
    caches: Any = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        """B, the number of images."""
        return self.memory_mask.shape[0]

    def reorder(self, index: Tensor, group: int | None = None) -> "DecoderState":
        """Keep hypotheses ``index`` (B * group,) — indices must stay within each image's group.
        With ``group``, the state holds that many hypotheses per image afterwards: beam search
        runs its first step with one hypothesis per image and then continues with K
        (``index`` then has B * K entries, each image's row repeated or not as chosen)."""
        group = self.group if group is None else group
        if index.shape[0] != self.batch_size * group:
            raise ValueError(f"reorder needs {self.batch_size} images x {group} hypotheses = "
                             f"{self.batch_size * group} indices, got {index.shape[0]}")
        return replace(self, caches=select_rows(self.caches, index), group=group)

    def reserved(self, capacity: int) -> "DecoderState":
        """The state whose decoding memories are allocated once for ``capacity`` steps (static
        decoding, :func:`catcap.decoding.generate`): a step writes its entry in place."""
        return replace(self, caches=reserve_rows(self.caches, capacity))

    def advanced(self, caches: Any) -> "DecoderState":
        """The state after one more token, with the updated caches."""
        return replace(self, caches=caches, position=self.position + 1)
