"""Attention on attention (AoA) and the multi-head attention of AoANet's decoder, with its
context-assisted variants (Huang et al. 2019; SPEC.md §3, §5).

AoA refines what an attention returned with the query that asked for it,

    AoA(f, Q) = sigmoid(W_q^g Q + W_v^g f + b^g) * (W_q^i Q + W_v^i f + b^i),

a GLU over ``[f; Q]`` (:class:`AttentionOnAttention`). AoANet uses it around multi-head
attention in the refiner (:mod:`catcap.models.encoders.aoa`) and in the decoder
(:mod:`catcap.models.decoders.aoa`), whose attention step is the module family here: from the
attention LSTM's state h, ``q = W_q LN(h)``, keys and values ``W_k A``, ``W_v A`` of the refined
regions A projected once per image, scaled dot-product attention per head, heads concatenated
(no output layer: AoA follows). Registered in ``HEAD_ATTENTION`` under the names of the other
families: ``vanilla``, ``caca``, ``light_caca``.

CACA (``caca``). The first pass attends to the regions; head h's attended context is the
region mixture ``c_hat^h_t = sum_i alpha^h_{t,i} A_i`` and it joins head h's historical context
memory. Head h's final pass attends to ``[A; c_hat^h_1..t]`` with the same projections, so an
entry's key and value are ``W_k^h c_hat^h + b = sum_i alpha^h_i K^h_i`` and ``sum_i alpha^h_i V^h_i``
(exact: the weights sum to 1), read from the region keys and values (N x d_k products per head
instead of D x d_k), and the value is the first pass's head output itself. The concatenation
of the heads' outputs (what the literal ``MHA(Q, [A; HCM])`` would store) lives in the value
space, where ``W_k``'s inputs do not; a head's own mixture is the attended context in the space
its keys are made from, and with one head it is soft-attention CACA exactly
(:mod:`catcap.models.cross.soft`). Strategies ``chc``/``ihc``/``ohc`` as everywhere;
``shared=False`` gives the final pass its own LayerNorm and projections (entries then use the
final pass's keys and values of the same mixture). The history weight a per head (R, H) is what
AWC constrains (one layer, H heads).

LightCACA (``light_caca``): one pass over ``[A; LN(h_1)..LN(h_t)]``, the memory holds the
normalised queries, projected by ``W_k``, ``W_v``.

Attention dropout (the reference's 0.1) acts on the weights that make the step's output: the
final pass. Entries are made from the first pass's weights without dropout. Without dropout
(evaluation, decoding) the final pass reuses the first pass's region scores
(:func:`~catcap.models.cross.history.attend_after_regions`, exact).
Legend: B images, G hypotheses per image, R = B * G rows, N regions, D width, H heads,
d_k = D / H, M history entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend
from catcap.models.cross.context_assisted import STRATEGIES
from catcap.models.cross.history import (HistoryAttention, RegionPass, _group_rows, _ungroup_rows, attend_after_regions,
                                         attend_regions, attend_with_history)
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.linear import Linear
from catcap.registry import HEAD_ATTENTION

#: dropout on the attention weights, as the reference AoANet (not the language model's 0.5)
ATTENTION_DROPOUT = 0.1


class AttentionOnAttention(nn.Module):
    """``AoA(f, Q) = sigmoid(W^g [f; Q] + b^g) * (W^i [f; Q] + b^i)``: attended f (..., D_f) and
    query Q (..., D_q) -> (..., D_out); ``dropout`` on the input ``[f; Q]`` (the refiner's 0.3)."""

    def __init__(self, d_attended: int, d_query: int, d_out: int, dropout: float = 0.0):
        super().__init__()
        self.linear = Linear(d_attended + d_query, 2 * d_out)  # rows: information W^i, then gate W^g
        self.dropout = nn.Dropout(dropout)

    def forward(self, attended: Tensor, query: Tensor) -> Tensor:
        information, gate = self.linear(self.dropout(torch.cat([attended, query], -1))).chunk(2, -1)
        return information * torch.sigmoid(gate)


@dataclass
class HeadRegions:
    """Refined regions of B images prepared once: ``values`` A (B, N, D) (the decoder's mean),
    ``first`` the keys/values (B, H, N, d_k) of the first pass, ``final`` the final pass's own
    (not shared; else None)."""

    values: Tensor
    first: KeyValue
    final: KeyValue | None = None


def concat_heads(heads: Tensor) -> Tensor:
    """(R, H, 1, d_k) -> (R, H * d_k): the heads of one step side by side."""
    return heads.reshape(heads.shape[0], -1)


def _extras(out: HistoryAttention) -> dict:
    """One step as one layer: a (R, H, 1), weights (R, H, 1, N) and (R, H, 1, M) (or None)."""
    return {"history_weight": out.history_weight, "region_attention": out.region_weights,
            "history_attention": out.history_weights}


@HEAD_ATTENTION.register("vanilla")
class HeadAttention(nn.Module):
    """AoANet's decoder attention (see module doc): ``prepare(memory)`` once per image;
    ``forward(h, prepared, memory_mask, cache, group)`` is one step of R = B * group rows ->
    (heads concatenated (R, D), cache, extras)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = ATTENTION_DROPOUT):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, output=False)

    @property
    def _p(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def prepare(self, memory: Tensor) -> HeadRegions:
        """(B, N, D) or levels (B, L, N, D) (the top level is read) -> values, keys/values."""
        values = memory[:, -1] if memory.dim() == 4 else memory
        return HeadRegions(values, self.attn.project_kv_levels(values))

    def init_cache(self, rows: int):
        return None

    def _query(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h (R, D) -> LN(h) (R, D) and its projection (R, H, 1, d_k)."""
        q_ln = self.norm(h)
        return q_ln, self.attn.project_q(q_ln[:, None])

    def forward(self, h: Tensor, prepared: HeadRegions, memory_mask: Tensor, cache, group: int = 1,
                previous: Tensor | None = None):
        _, qh = self._query(h)
        b = memory_mask.shape[0]
        heads, _ = attend(_group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :], self._p)
        return concat_heads(_ungroup_rows(heads, group)), cache, {}


class _WithHistory(HeadAttention):
    """What CACA and LightCACA share: the strategy, the memory and the final pass."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = ATTENTION_DROPOUT, strategy: str = "chc"):
        super().__init__(d_model, num_heads, dropout)
        if strategy not in STRATEGIES:
            raise ValueError(f"history strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy

    def init_cache(self, rows: int) -> HistoricalContextMemory:
        return HistoricalContextMemory()

    def _visible(self, before: HistoricalContextMemory, after: HistoricalContextMemory) -> KeyValue | None:
        """The entries the final pass reads: up to t-1 for ``ihc``, up to t otherwise."""
        return before.keys if self.strategy == "ihc" else after.keys

    def _final(self, qh: Tensor, regions: KeyValue, memory_mask: Tensor, first: RegionPass | None,
               history: KeyValue | None, group: int):
        """One softmax over [regions; history] (history alone for OHC) -> (heads (R, D), extras).
        ``first``: the first pass over the same keys with the same query, reused when there is
        no dropout."""
        ohc = self.strategy == "ohc"
        if self._p == 0.0 and first is not None:
            out = attend_after_regions(qh, first, history, None, regions_in_final=not ohc)
        else:
            out = attend_with_history(qh, None if ohc else regions, memory_mask, history, None, group, self._p)
        return concat_heads(out.heads), _extras(out)


@HEAD_ATTENTION.register("caca")
class ContextAssistedHeadAttention(_WithHistory):
    """CACA in AoANet's decoder: per head, the first pass's region mixture joins the head's memory
    and the final pass attends to [regions; mixtures 1..t] (see module doc)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float = ATTENTION_DROPOUT, strategy: str = "chc",
                 shared: bool = True):
        super().__init__(d_model, num_heads, dropout, strategy)
        self.shared = shared
        if not shared:
            self.final_norm = nn.LayerNorm(d_model)
            self.final_attn = MultiHeadAttention(d_model, num_heads, dropout, output=False)

    def prepare(self, memory: Tensor) -> HeadRegions:
        regions = super().prepare(memory)
        if not self.shared:
            regions.final = self.final_attn.project_kv_levels(regions.values)
        return regions

    def forward(self, h: Tensor, prepared: HeadRegions, memory_mask: Tensor, cache: HistoricalContextMemory,
                group: int = 1, previous: Tensor | None = None):
        """h (R, D) -> heads of the final pass (R, D), the memory with c_hat_t appended, extras."""
        _, qh = self._query(h)
        first = attend_regions(qh, prepared.first, memory_mask, group)  # weights (R, H, 1, N), no dropout
        final = prepared.first if self.shared else prepared.final
        after = cache.appended(self._entry(first, final, group))
        if not self.shared:
            qh = self.final_attn.project_q(self.final_norm(h)[:, None])
            first = None
        heads, extras = self._final(qh, final, memory_mask, first, self._visible(cache, after), group)
        return heads, after, extras

    def _entry(self, first: RegionPass, regions: KeyValue, group: int) -> KeyValue:
        """Each head's mixture ``sum_i alpha^h_i A_i`` under the reading pass's projections:
        keys ``alpha^h K^h`` and values ``alpha^h V^h`` (R, H, 1, d_k); with shared weights the
        value is the first pass's head output."""
        alpha = _group_rows(first.weights, regions.k.shape[0], group)  # (B, H, G, N)
        value = first.heads if self.shared else _ungroup_rows(alpha @ regions.v, group)
        return KeyValue(_ungroup_rows(alpha @ regions.k, group), value)


@HEAD_ATTENTION.register("light_caca")
class LightContextAssistedHeadAttention(_WithHistory):
    """LightCACA in AoANet's decoder: one pass over [regions; LN(h_1)..LN(h_t)]."""

    def forward(self, h: Tensor, prepared: HeadRegions, memory_mask: Tensor, cache: HistoricalContextMemory,
                group: int = 1, previous: Tensor | None = None):
        """h (R, D) -> heads (R, D), the memory with LN(h_t) appended, extras."""
        q_ln, qh = self._query(h)
        after = cache.appended(self.attn.project_kv_levels(q_ln[:, None]))  # (R, H, 1, d_k)
        first = None if self._p or self.strategy == "ohc" else attend_regions(qh, prepared.first, memory_mask, group)
        heads, extras = self._final(qh, prepared.first, memory_mask, first, self._visible(cache, after), group)
        return heads, after, extras
