"""The cross attention of the Transformer decoders (Transformer, CAT, M2): TCA, CACA, LightCACA.

One sub-layer from caption positions to the encoder's levels X_i, read through the decoder's
mix (:mod:`catcap.models.cross.mix`: the top level, or M2's gates). Pre-norm (catcap's blocks):

    A_i = MHA(LN(q), X_i),            c = q + Dropout(Mix(LN(q), [A_i]_i))

Post-norm (``post_norm=True``, the official M2's sub-layer; no dropout on attention weights):

    C_i = LN(q + Dropout(MHA(q, X_i))),   c = Mix(q, [C_i]_i)

so with the top level c = LN(q + Dropout(MHA(q, X))), and with M2's gates the residual is inside
each C_i and the gates read [q; C_i], with no residual around their sum.

``history`` (a :class:`~catcap.models.cross.assist.ContextAssist`, None for TCA) makes it CACA or
LightCACA; the strategy runs the passes, this class supplies them. CACA's entry is the step's
context ``c_tmp``: per level (``placement: per_level``) ``q + Dropout(A_i)`` (pre-norm) or C_i
(post-norm), each level keeping its own history; or, ``gated``, the first pass's whole sub-layer
output, one history read by every level. LightCACA's entry is the query. Pre-norm entries go
through the reading pass's LayerNorm (``normalize``; the residual stream is not normalised,
while the regions are the encoder's LayerNorm-ed output: raw entries got ~10x larger keys and a
one-hot softmax on the history, docs/cat.md); post-norm entries already are LayerNorm outputs.
Entries are stored as the final pass's projected keys/values. Every pass attends the same query
to every level (level-heads, :mod:`catcap.models.attention`) and region keys/values are
projected once per image. Every CACA call returns extras: ``history_weight`` a_t (R, L*H, T)
(the AWC loss's input), ``region_attention`` (R, L*H, T, N) and ``history_attention``
(R, L*H, T, M) of the final pass (None where a block is absent).

Over several levels on a CPU TCA computes scores, softmax and product as three operations
rather than by PyTorch's fused kernel: with M2's 3 x 8 level-heads the fused CPU kernel took
2.15 ms per greedy step and layer against 1.56 ms (50 images, 50 regions, one thread), while
over one level the two are within 10% (benchmarks/results/m2.md).
Legend: B images, G hypotheses per image, R = B * G rows, T positions, N regions, D width, H heads,
L levels read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend, level_queries
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.history import (RegionPass, attend_after_regions, attend_regions,
                                         attend_with_history, group_rows, history_extras, ungroup_rows)
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.cross.mix import TopLevel, top_levels


@dataclass
class PreparedRegions:
    """Level-head region keys/values, once per image: ``first`` (B, L*H, N, d_k) for CACA's
    first pass, ``final`` for the final pass, both contiguous (:meth:`KeyValue.contiguous`; the
    same when weights are shared; ``first`` None for LightCACA, ``final`` None for OHC)."""

    first: KeyValue | None
    final: KeyValue | None


class TransformerCrossAttention(nn.Module):
    """Cross attention from caption positions to the image regions (see module doc).

    ``prepare(memory)`` once per image; ``forward(q (R, T, D), prepared, memory_mask (B, N),
    query_mask (R, T), group)`` for all positions -> (c, extras); ``init_cache(rows)`` and
    ``step(q (R, 1, D), prepared, memory_mask, cache, group)`` -> (c, cache, extras)."""

    #: the ``model.history`` options this family can vary
    history_options = frozenset({"strategy", "shared", "normalize", "placement"})

    def __init__(self, d_model: int, num_heads: int, dropout: float, mix: nn.Module | None = None,
                 history: ContextAssist | None = None, post_norm: bool = False):
        super().__init__()
        self.history, self.post_norm = history, post_norm
        attention_dropout = 0.0 if post_norm else dropout  # the official M2 has none on attention weights
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, attention_dropout)
        self.dropout = nn.Dropout(dropout)
        self.mix = mix if mix is not None else TopLevel()
        if history is not None and history.separate_final:
            self.final_norm = nn.LayerNorm(d_model)
            self.final_attn = MultiHeadAttention(d_model, num_heads, attention_dropout)

    @property
    def levels(self) -> int:
        return self.mix.levels

    @property
    def attention_dropout(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def _parts(self, final: bool) -> tuple[nn.LayerNorm, MultiHeadAttention]:
        """The LayerNorm and MHA of the first pass, or of the final pass (its own when not shared)."""
        return (self.final_norm, self.final_attn) if final and self.history.separate_final else (self.norm, self.attn)

    def prepare(self, memory: Tensor):
        """(B, N, D) or (B, L', N, D) encoder output -> level-head keys/values, once per image:
        a KeyValue (B, L*H, N, d_k) for TCA, :class:`PreparedRegions` with a history."""
        levels = top_levels(memory, self.levels)
        if self.history is None:
            return self.attn.project_kv_levels(levels)
        first = None if self.history.light else self.attn.project_kv_levels(levels)
        if not self.history.regions_in_final:
            return PreparedRegions(first, None)
        if self.history.separate_final:
            return PreparedRegions(first, self.final_attn.project_kv_levels(levels))
        return PreparedRegions(first, first if first is not None else self.attn.project_kv_levels(levels))

    def init_cache(self, rows: int):
        return None if self.history is None else HistoricalContextMemory()

    def forward(self, q: Tensor, prepared, memory_mask: Tensor, query_mask: Tensor | None = None, group: int = 1):
        """q (R, T, D), R = B * group captions (image-major) -> c (R, T, D), extras; every position
        attends to its image's real regions (the group's captions share them, no copies)."""
        if self.history is not None:
            if query_mask is None:
                query_mask = torch.ones(q.shape[:2], dtype=torch.bool, device=q.device)
            return self.history.forward(self, q, prepared, memory_mask, query_mask, group)
        rows, t, d = q.shape
        grouped = (q if self.post_norm else self.norm(q)).reshape(rows // group, group * t, d)
        heads, _ = attend(level_queries(self.attn.project_q(grouped), self.levels), prepared.k, prepared.v,
                          memory_mask[:, None, :], self.attention_dropout,
                          explicit=self.levels > 1 and q.device.type == "cpu")
        attended = self.attn.merge_levels(heads, self.levels)
        if self.post_norm:
            return self.mix(grouped, self._post_norm(grouped, attended, self.norm)).reshape(rows, t, d), {}
        return q + self.dropout(self.mix(grouped, attended).reshape(rows, t, d)), {}

    def step(self, q: Tensor, prepared, memory_mask: Tensor, cache, group: int):
        """q (B*G, 1, D): the G hypotheses of an image attend as G queries (no memory copies)."""
        if self.history is not None:
            return self.history.step(self, q, prepared, memory_mask, cache, group)
        c, extras = self.forward(q, prepared, memory_mask, None, group)
        return c, cache, extras

    def _post_norm(self, q: Tensor, attended: Tensor, norm: nn.LayerNorm) -> Tensor:
        """Per-level post-norm sub-layer outputs C_i = LN(q + Dropout(A_i)), (R, L, T, D)."""
        return norm(q[:, None] + self.dropout(attended))

    def _output(self, q: Tensor, query: Tensor, heads: Tensor, final: bool) -> Tensor:
        """Level-head outputs (R, L*H, T, d_k) of a pass -> the sub-layer output c (R, T, D)."""
        norm, attn = self._parts(final)
        attended = attn.merge_levels(heads, self.levels)
        if self.post_norm:
            return self.mix(q, self._post_norm(q, attended, norm))
        return q + self.dropout(self.mix(query, attended))

    # --- the passes ContextAssist runs (catcap.models.cross.assist) ---

    def query(self, q: Tensor, final: bool = False) -> tuple[Tensor, Tensor]:
        """q (R, T, D) -> the attention input (LN(q) pre-norm, q post-norm) and its level-head
        projection (R, L*H, T, d_k), for the first pass or the final pass's own weights."""
        norm, attn = self._parts(final)
        query = q if self.post_norm else norm(q)
        return query, level_queries(attn.project_q(query), self.levels)

    def first_pass(self, query, prepared: PreparedRegions, memory_mask: Tensor, group: int, keep: bool) -> RegionPass:
        """CACA's first pass over the regions; with ``keep`` the scores the final pass reuses,
        else the heads alone (fused kernel, attention dropout on)."""
        qh = query[1]
        if keep:
            return attend_regions(qh, prepared.first, memory_mask, group)
        b = memory_mask.shape[0]
        heads, _ = attend(group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :],
                          self.attention_dropout)
        return RegionPass(ungroup_rows(heads, group), None, None)

    def context_entry(self, q: Tensor, query, first: RegionPass, prepared, group: int,
                      assist: ContextAssist) -> KeyValue:
        """CACA's entries: c_tmp per level ((R, L*H, T, d_k)) or after the gates ((R, H, T, d_k)),
        projected by the final pass's keys/values (pre-norm: of LN(c_tmp) when ``normalize``)."""
        attended = self.attn.merge_levels(first.heads, self.levels)  # (R, L, T, D)
        gated = assist.placement == "gated"
        if self.post_norm:
            c_tmp = self._post_norm(q, attended, self.norm)
            c_tmp = self.mix(q, c_tmp) if gated else c_tmp
        else:
            c_tmp = q + self.dropout(self.mix(query[0], attended)) if gated else q[:, None] + self.dropout(attended)
        final_norm, final_attn = self._parts(final=True)
        normalize = assist.normalize and not self.post_norm
        return final_attn.project_kv_levels(final_norm(c_tmp) if normalize else c_tmp)

    def query_entry(self, q: Tensor, query, assist: ContextAssist) -> KeyValue:
        """LightCACA's entries: the projected queries (R, H, T, d_k), one history for every level
        (pre-norm: LN(q) when ``normalize``, else q)."""
        return self.attn.project_kv_levels(query[0] if assist.normalize else q)

    def region_pass(self, query, prepared: PreparedRegions, memory_mask: Tensor, group: int,
                    assist: ContextAssist) -> RegionPass:
        return attend_regions(query[1], prepared.final, memory_mask, group)

    def final_pass(self, q: Tensor, query, regions: RegionPass | None, prepared: PreparedRegions, memory_mask: Tensor,
                   history: KeyValue | None, mask: Tensor | None, group: int, assist: ContextAssist):
        """The final pass over [regions; history] (block by block from ``regions``, else one
        softmax over the concatenation, with attention dropout) -> (c, extras)."""
        if regions is not None:
            out = attend_after_regions(query[1], regions, history, mask, assist.regions_in_final)
        else:
            out = attend_with_history(query[1], prepared.final, memory_mask, history, mask, group,
                                      self.attention_dropout)
        return self._output(q, query[0], out.heads, final=True), history_extras(out)

