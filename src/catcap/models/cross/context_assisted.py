"""Context-assisted cross attention: CACA and LightCACA (Lian et al. 2023; SPEC.md §3).

CACA, at step t of a decoder layer, with query q_t and regions X:

    q_ln    = LayerNorm(q_t)
    c_tmp_t = q_t + MHA(q_ln, X, X)                       first pass (= vanilla cross attention)
    HCM_t   = [c_tmp_1; ..; c_tmp_t]                      historical context memory
    c_t     = q_t + MHA(q_ln, [X; HCM_t], [X; HCM_t])     final pass

Strategies (Table 5): ``chc`` as above (CACA), ``ihc`` history up to t-1 plus regions, ``ohc``
history alone. ``shared=False`` gives the final pass its own LayerNorm and MHA (Table 6).
LightCACA: one pass, the memory holds the queries, ``c_t = q_t + MHA(LN(q_t), [X; q_1..q_t])``.

History entries are normalised by the LayerNorm of the pass that reads them (``normalize``,
default on; no new parameters): in this pre-norm decoder ``c_tmp`` and ``q`` are raw residual
stream vectors whose scale grows with depth, while the regions are the encoder's LayerNorm-ed
output and every other attention input is normalised; unnormalised entries got ~10x larger
keys than the regions and a one-hot softmax on the history (docs/architecture.md). In the
paper's post-LN Transformer ``c_tmp`` is a LayerNorm output, so the normalised form is the
faithful one here; ``normalize=False`` gives the literal formula above.

Training is parallel over positions (one first pass, one final pass with a block mask);
decoding appends one history entry per step to a :class:`HistoricalContextMemory` kept in the
decoder state. Region keys/values are projected once per image; with shared weights the
query projection and the region keys/values serve both passes. Every call returns extras:
``history_weight`` a_t (B, H, T) (the AWC loss's input), ``region_attention`` (B, H, T, N) and
``history_attention`` (B, H, T, M) of the final pass (None where a block is absent).

Several encoder levels (M2's meshed decoder, :mod:`catcap.models.cross.mix`): every pass attends
the same query to each level ``X_i`` (level-heads) and the mix combines the per-level results.
``placement`` says where the history lives: ``per_level`` (default) — each level's CACA keeps
its own HCM of ``c_tmp_i = q_t + MHA(q_ln, X_i)`` and its final pass reads ``[X_i; HCM_i]``, i.e.
every ``C(Y, X_i)`` of M2 becomes a CACA, as the paper replaces each TCA; ``gated`` — one HCM
per layer of the gated first pass ``c_tmp = q_t + Mix(q_ln, [MHA(q_ln, X_i)]_i)``, read by every
level's final pass (docs/m2.md). LightCACA's entries are the queries, the same for every level,
so it keeps one HCM per layer either way. With one level the two placements are the same.
Legend: B images, G hypotheses per image, R = B * G, T positions, N regions, D width, H heads
(L*H level-heads), L levels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend, level_queries
from catcap.models.cross.history import (HistoryAttention, _group_rows, _ungroup_rows,
                                         attend_after_regions, attend_regions, attend_with_history)
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.cross.mix import TopLevel, top_levels
from catcap.registry import CROSS_ATTENTION

STRATEGIES = ("chc", "ihc", "ohc")
PLACEMENTS = ("per_level", "gated")


@dataclass
class PreparedRegions:
    """Level-head region keys/values, once per image: ``first`` (B, L*H, N, d_k) for the first
    pass, ``final`` for the final pass, both contiguous (:meth:`KeyValue.contiguous`; from the
    same projection when weights are shared; None for OHC, which ignores regions)."""

    first: KeyValue | None
    final: KeyValue | None


def history_mask(query_mask: Tensor, strategy: str) -> Tensor:
    """(B, T) True = real position -> (B, 1, T, T): query t may attend history entry s when
    s <= t (``ihc``: s < t) and s is a real position. A padded query sees its own entry, so
    that no row is empty (its output is never used)."""
    t = query_mask.shape[1]
    steps = torch.ones(t, t, dtype=torch.bool, device=query_mask.device)
    allowed = steps.tril(-1 if strategy == "ihc" else 0)[None] & query_mask[:, None, :]
    allowed = allowed | (torch.eye(t, dtype=torch.bool, device=query_mask.device)[None] & ~query_mask[:, :, None])
    return allowed[:, None]


def _extras(out: HistoryAttention) -> dict:
    return {"history_weight": out.history_weight, "region_attention": out.region_weights,
            "history_attention": out.history_weights}


class _WithHistory(nn.Module):
    """Shared parts of CACA and LightCACA: the (first) LayerNorm + MHA, dropout, strategy, mix."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, strategy: str = "chc", normalize: bool = True,
                 mix: nn.Module | None = None):
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"history strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy, self.normalize = strategy, normalize
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.dropout = nn.Dropout(dropout)
        self.mix = mix if mix is not None else TopLevel()

    @property
    def levels(self) -> int:
        return self.mix.levels

    @property
    def _p(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def init_cache(self, rows: int) -> HistoricalContextMemory:
        return HistoricalContextMemory()

    def _final(self, q: Tensor, q_ln: Tensor, qh: Tensor, regions: KeyValue | None, memory_mask: Tensor,
               history: KeyValue | None, mask: Tensor | None, attn: MultiHeadAttention, group: int):
        """c = q + Mix(q_ln, MHA over [regions; history] per level) -> (c, extras); qh the
        level-head query. Without attention dropout the regions and the history are attended
        block by block (same result, no concatenation)."""
        if self._p == 0.0 and self.strategy != "ohc":
            out = attend_after_regions(qh, attend_regions(qh, regions, memory_mask, group), history, mask)
        else:
            out = attend_with_history(qh, None if self.strategy == "ohc" else regions, memory_mask,
                                      history, mask, group, self._p)
        return self._output(q, q_ln, out.heads, attn), _extras(out)

    def _output(self, q: Tensor, q_ln: Tensor, heads: Tensor, attn: MultiHeadAttention) -> Tensor:
        """Level-head outputs (R, L*H, T, d_k) -> c = q + Dropout(Mix(q_ln, W_O per level))."""
        return q + self.dropout(self.mix(q_ln, attn.merge_levels(heads, self.levels)))

    def _visible(self, before: HistoricalContextMemory, after: HistoricalContextMemory) -> KeyValue | None:
        """The entries the current step attends to: up to t-1 for ``ihc``, up to t otherwise."""
        return before.keys if self.strategy == "ihc" else after.keys


@CROSS_ATTENTION.register("caca")
class ContextAssistedCrossAttention(_WithHistory):
    """CACA: first pass over regions, final pass over [regions; c_tmp_1..t] (see module doc)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, strategy: str = "chc", shared: bool = True,
                 normalize: bool = True, placement: str = "per_level", mix: nn.Module | None = None):
        super().__init__(d_model, num_heads, dropout, strategy, normalize, mix)
        if placement not in PLACEMENTS:
            raise ValueError(f"history placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.shared, self.placement = shared, placement
        if not shared:
            self.final_norm = nn.LayerNorm(d_model)
            self.final_attn = MultiHeadAttention(d_model, num_heads, dropout)

    def _final_parts(self) -> tuple[nn.LayerNorm, MultiHeadAttention]:
        return (self.norm, self.attn) if self.shared else (self.final_norm, self.final_attn)

    def prepare(self, memory: Tensor) -> PreparedRegions:
        """(B, N, D) or (B, L', N, D) -> level-head region keys/values for both passes, once per image."""
        levels = top_levels(memory, self.levels)
        first = self.attn.project_kv_levels(levels)
        if self.strategy == "ohc":
            return PreparedRegions(first, None)
        return PreparedRegions(first, first if self.shared else self.final_attn.project_kv_levels(levels))

    def _queries(self, q: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """q (R, T, D) -> LN(q) and its level-head projection for the first pass, and the same
        for the final pass (the same tensors when weights are shared)."""
        q_ln = self.norm(q)
        qh = level_queries(self.attn.project_q(q_ln), self.levels)
        if self.shared:
            return q_ln, qh, q_ln, qh
        final_ln = self.final_norm(q)
        return q_ln, qh, final_ln, level_queries(self.final_attn.project_q(final_ln), self.levels)

    def forward(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D) with R = B * group captions (group per image, image-major), memory_mask
        (B, N), query_mask (R, T) True = real -> c (R, T, D), extras."""
        if query_mask is None:
            query_mask = torch.ones(q.shape[:2], dtype=torch.bool, device=q.device)
        q_ln, qh, final_ln, final_qh = self._queries(q)
        mask = history_mask(query_mask, self.strategy)
        if self._one_score_pass:
            return self._shared_passes(q, q_ln, qh, prepared, memory_mask, self._entry, mask, group)[:2]
        c_tmp = self._c_tmp(q, q_ln, self._first_pass(qh, prepared, memory_mask, group))
        return self._final(q, final_ln, final_qh, prepared.final, memory_mask, self._entry(c_tmp), mask,
                           self._final_parts()[1], group)

    def step(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, cache: HistoricalContextMemory, group: int):
        """q (R, 1, D) -> c (R, 1, D), the memory with c_tmp_t appended, extras (T = 1)."""
        q_ln, qh, final_ln, final_qh = self._queries(q)
        if self._one_score_pass:
            grown = []

            def history(c_tmp):  # append c_tmp_t, then read what the strategy allows
                grown.append(cache.appended(self._entry(c_tmp)))
                return self._visible(cache, grown[0])

            c, extras, _ = self._shared_passes(q, q_ln, qh, prepared, memory_mask, history, None, group)
            return c, grown[0], extras
        c_tmp = self._c_tmp(q, q_ln, self._first_pass(qh, prepared, memory_mask, group))
        after = cache.appended(self._entry(c_tmp))
        c, extras = self._final(q, final_ln, final_qh, prepared.final, memory_mask, self._visible(cache, after), None,
                                self._final_parts()[1], group)
        return c, after, extras

    @property
    def _one_score_pass(self) -> bool:
        """Shared weights and no attention dropout: both passes from one set of region scores
        (:func:`attend_after_regions`, exact). With dropout in training each pass draws its own
        mask, so the two passes are computed separately."""
        return self.shared and self._p == 0.0

    def _first_pass(self, qh: Tensor, prepared: PreparedRegions, memory_mask: Tensor, group: int) -> Tensor:
        """Level-head first-pass outputs (R, L*H, T, d_k) over the regions (attention dropout on)."""
        b = memory_mask.shape[0]
        first, _ = attend(_group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :], self._p)
        return _ungroup_rows(first, group)

    def _c_tmp(self, q: Tensor, q_ln: Tensor, heads: Tensor) -> Tensor:
        """First-pass level-head outputs -> c_tmp: per level (R, L, T, D) ``q + MHA(q_ln, X_i)``,
        or gated (R, T, D) ``q + Mix(q_ln, ..)``."""
        attended = self.attn.merge_levels(heads, self.levels)  # (R, L, T, D)
        if self.placement == "gated":
            return q + self.dropout(self.mix(q_ln, attended))
        return q[:, None] + self.dropout(attended)

    def _entry(self, c_tmp: Tensor) -> KeyValue:
        """History entries' keys/values: the final pass's projection of (normalised) c_tmp —
        (R, L*H, T, d_k) per level, or (R, H, T, d_k) for one gated c_tmp."""
        final_norm, final_attn = self._final_parts()
        return final_attn.project_kv_levels(final_norm(c_tmp) if self.normalize else c_tmp)

    def _shared_passes(self, q, q_ln, qh, prepared: PreparedRegions, memory_mask, history_of, mask, group):
        """Shared-weight CACA with one set of region scores (:func:`attend_regions`, then
        :func:`attend_after_regions`); ``history_of(c_tmp)`` gives the history keys the final
        pass reads. -> (c, extras, c_tmp)."""
        regions = prepared.first if prepared.final is None else prepared.final
        first = attend_regions(qh, regions, memory_mask, group)
        c_tmp = self._c_tmp(q, q_ln, first.heads)
        out = attend_after_regions(qh, first, history_of(c_tmp), mask, self.strategy != "ohc")
        return self._output(q, q_ln, out.heads, self.attn), _extras(out), c_tmp


@CROSS_ATTENTION.register("light_caca")
class LightContextAssistedCrossAttention(_WithHistory):
    """LightCACA: one pass over [regions; q_1..q_t] (see module doc)."""

    def prepare(self, memory: Tensor) -> PreparedRegions:
        """(B, N, D) or (B, L', N, D) -> level-head region keys/values, once per image (None for OHC)."""
        if self.strategy == "ohc":
            return PreparedRegions(None, None)
        return PreparedRegions(None, self.attn.project_kv_levels(top_levels(memory, self.levels)))

    def _entry(self, q: Tensor, q_ln: Tensor) -> KeyValue:
        """History entries: the projected (normalised) queries, (R, H, T, d_k), one HCM for all levels."""
        return self.attn.project_kv_levels(q_ln if self.normalize else q)

    def forward(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D) with R = B * group captions, memory_mask (B, N), query_mask (R, T) True =
        real -> c (R, T, D), extras."""
        if query_mask is None:
            query_mask = torch.ones(q.shape[:2], dtype=torch.bool, device=q.device)
        q_ln = self.norm(q)
        qh = level_queries(self.attn.project_q(q_ln), self.levels)
        return self._final(q, q_ln, qh, prepared.final, memory_mask, self._entry(q, q_ln),
                           history_mask(query_mask, self.strategy), self.attn, group)

    def step(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, cache: HistoricalContextMemory, group: int):
        """q (R, 1, D) -> c (R, 1, D), the memory with q_t appended, extras (T = 1)."""
        q_ln = self.norm(q)
        qh = level_queries(self.attn.project_q(q_ln), self.levels)
        after = cache.appended(self._entry(q, q_ln))
        c, extras = self._final(q, q_ln, qh, prepared.final, memory_mask, self._visible(cache, after), None, self.attn, group)
        return c, after, extras
