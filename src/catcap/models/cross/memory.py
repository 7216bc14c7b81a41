"""Decoding memories of keys/values that grow by one entry per step and follow beam search's
reorders: CACA's historical context memory (HCM, SPEC.md §3) and the decoder's self-attention
cache.

A decoding memory holds, for every hypothesis (R rows), the projected keys/values of its t
entries, and beam search reorders the rows after every step. Grown by one copy of the whole
memory per step and gathered by another per reorder, with fresh (kernel-zeroed) pages for every
new tensor, the history was the largest cost of M2 + per-level CACA's beam search, which is
memory-bound, not arithmetic-bound (benchmarks/results/m2.md). So, without autograd, the
entries live in time-major buffers (capacity, R, H', d_k), allocated once and doubled when full:

- a step writes its slot in place;
- a beam reorder gathers the t entries (one contiguous ``index_select``) into a second pair of
  buffers, which the reordered memory then owns, while the first pair becomes its spare for
  the next reorder; after the first reorder a decode allocates nothing more.

Attention reads ``keys``, (R, H', t, d_k) views of the buffers (no copy: the batched products
and PyTorch's fused attention take the strided keys as they are). Under autograd every step
makes new tensors instead (:meth:`KeyValue.cat`), so that gradients flow through cached steps.

The in-place buffers have two rules, which decoding follows: a memory is appended to once and
reordered once (a second append or reorder of the same memory overwrites the first one's
buffers), and after ``index_select`` the memory it came from stays valid only until the new one
is reordered again. An alternative that never gathers — each image's hypotheses scoring all
t * G entries of their image under an ancestry mask — was measured and not kept: its G-fold
attention arithmetic cost more than the gathers it saved (m2_caca / m2 beam-5 1.391 against
1.311, one run each).

Legend: R rows (B images x G hypotheses), H' heads (L*H level-heads, or H), t entries,
d_k = D / H.
"""

from __future__ import annotations

import torch
from torch import Tensor

from catcap.models.attention import KeyValue


class KeyValueMemory:
    """Keys/values of every row during decoding (see module doc): ``keys`` is a KeyValue of
    (R, H', t, d_k), None before the first step."""

    CAPACITY = 24  # entries before the first doubling: past catcap's default caption length of 20

    __slots__ = ("_keys", "_store", "_length", "_capacity")

    def __init__(self, keys: KeyValue | None = None, store: _TimeMajor | None = None, length: int = 0,
                 capacity: int | None = None):
        self._keys, self._store, self._length, self._capacity = keys, store, length, capacity

    def reserve(self, capacity: int) -> "KeyValueMemory":
        """An empty memory whose buffers, allocated at its first write, hold ``capacity``
        entries (static decoding: no doubling, no allocation by later steps but the reorders')."""
        if self.length:
            raise ValueError("reserve a decoding memory before its first step")
        return type(self)(capacity=capacity)

    @property
    def keys(self) -> KeyValue | None:
        return self._store.view(self._length) if self._store is not None else self._keys

    @property
    def length(self) -> int:
        if self._store is not None:
            return self._length
        return 0 if self._keys is None else self._keys.length

    def appended(self, entry: KeyValue) -> "KeyValueMemory":
        """The memory with ``entry``'s positions appended per row (``entry`` is (R, H', n, d_k))."""
        functional = self._keys is not None or (torch.is_grad_enabled()
                                                and (entry.k.requires_grad or entry.v.requires_grad))
        if self._store is None and functional:
            return type(self)(entry.contiguous() if self._keys is None else self._keys.cat(entry))
        store = self._store if self._store is not None else _TimeMajor.like(entry, self._capacity or self.CAPACITY)
        return type(self)(store=store.write(self._length, entry), length=self._length + entry.k.shape[2])

    def index_select(self, index: Tensor) -> "KeyValueMemory":
        """Rows ``index`` (beam reordering)."""
        if self._store is not None:
            return type(self)(store=self._store.gather(self._length, index), length=self._length)
        return self if self._keys is None else type(self)(self._keys.index_select(index))


class HistoricalContextMemory(KeyValueMemory):
    """The HCM of one CACA layer during decoding: the projected keys/values of its history
    entries (c_tmp's for CACA, the queries for LightCACA), (R, H', t, d_k)."""

    __slots__ = ()

    @property
    def entries(self) -> KeyValue | None:
        """What attention reads: the entries' keys/values (None before the first step)."""
        return self.keys


class _TimeMajor:
    """Keys and values of a decoding memory, time-major: (capacity, R, H', d_k) each, entries
    [0, t) in use; ``spare``: another pair of the same shape for the next gather, or None."""

    __slots__ = ("k", "v", "spare")

    def __init__(self, k: Tensor, v: Tensor, spare: tuple[Tensor, Tensor] | None = None):
        self.k, self.v, self.spare = k, v, spare

    @classmethod
    def like(cls, entry: KeyValue, capacity: int) -> "_TimeMajor":
        rows, heads, _, d_k = entry.k.shape
        return cls(entry.k.new_empty(capacity, rows, heads, d_k), entry.v.new_empty(capacity, rows, heads, d_k))

    def view(self, length: int) -> KeyValue:
        """Entries [0, length) as (R, H', length, d_k) views."""
        return KeyValue(self.k[:length].permute(1, 2, 0, 3), self.v[:length].permute(1, 2, 0, 3))

    def write(self, length: int, entry: KeyValue) -> "_TimeMajor":
        """``entry`` (R, H', n, d_k) into slots [length, length + n), doubling the capacity if needed."""
        n = entry.k.shape[2]
        store = self if length + n <= self.k.shape[0] else self._grown(length, length + n)
        store.k[length:length + n] = entry.k.permute(2, 0, 1, 3)
        store.v[length:length + n] = entry.v.permute(2, 0, 1, 3)
        return store

    def _grown(self, length: int, needed: int) -> "_TimeMajor":
        capacity = max(needed, 2 * self.k.shape[0])
        k, v = self.k.new_empty(capacity, *self.k.shape[1:]), self.v.new_empty(capacity, *self.v.shape[1:])
        k[:length], v[:length] = self.k[:length], self.v[:length]
        return _TimeMajor(k, v)

    def gather(self, length: int, index: Tensor) -> "_TimeMajor":
        """Rows ``index`` of entries [0, length) into the spare pair (new buffers when there is
        none of the right shape); this pair becomes the result's spare."""
        shape = (self.k.shape[0], index.shape[0], *self.k.shape[2:])
        if self.spare is not None and self.spare[0].shape == shape:
            k, v = self.spare
        else:
            k, v = self.k.new_empty(shape), self.v.new_empty(shape)
        torch.index_select(self.k[:length], 1, index, out=k[:length])
        torch.index_select(self.v[:length], 1, index, out=v[:length])
        return _TimeMajor(k, v, (self.k, self.v) if shape == self.k.shape else None)
