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
Legend: B images, G hypotheses per image, R = B * G, T positions, N regions, D width, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend
from catcap.models.cross.history import (HistoricalContextMemory, HistoryAttention, _group_rows, _ungroup_rows,
                                         attend_after_regions, attend_regions, attend_with_history)
from catcap.registry import CROSS_ATTENTION

STRATEGIES = ("chc", "ihc", "ohc")


@dataclass
class PreparedRegions:
    """Region keys/values, once per image: ``first`` (B, H, N, d_k) for the first pass (SDPA),
    ``final`` for the final pass, made contiguous (:meth:`KeyValue.contiguous`) (from the same
    projection when weights are shared; None for OHC, which ignores regions)."""

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
    """Shared parts of CACA and LightCACA: the (first) LayerNorm + MHA, dropout, strategy."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, strategy: str = "chc", normalize: bool = True):
        super().__init__()
        if strategy not in STRATEGIES:
            raise ValueError(f"history strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy, self.normalize = strategy, normalize
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.dropout = nn.Dropout(dropout)

    @property
    def _p(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def init_cache(self, rows: int) -> HistoricalContextMemory:
        return HistoricalContextMemory()

    def _final(self, q: Tensor, qh: Tensor, regions: KeyValue | None, memory_mask: Tensor,
               history: KeyValue | None, mask: Tensor | None, attn: MultiHeadAttention, group: int):
        """c = q + MHA over [regions; history] -> (c, extras). Without attention dropout the
        regions and the history are attended block by block (same result, no concatenation)."""
        if self._p == 0.0 and self.strategy != "ohc":
            out = attend_after_regions(qh, attend_regions(qh, regions, memory_mask, group), history, mask)
        else:
            out = attend_with_history(qh, None if self.strategy == "ohc" else regions, memory_mask,
                                      history, mask, group, self._p)
        return q + self.dropout(attn.merge(out.heads)), _extras(out)

    def _visible(self, before: HistoricalContextMemory, after: HistoricalContextMemory) -> KeyValue | None:
        """The entries the current step attends to: up to t-1 for ``ihc``, up to t otherwise."""
        return before.keys if self.strategy == "ihc" else after.keys


@CROSS_ATTENTION.register("caca")
class ContextAssistedCrossAttention(_WithHistory):
    """CACA: first pass over regions, final pass over [regions; c_tmp_1..t] (see module doc)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, strategy: str = "chc", shared: bool = True,
                 normalize: bool = True):
        super().__init__(d_model, num_heads, dropout, strategy, normalize)
        self.shared = shared
        if not shared:
            self.final_norm = nn.LayerNorm(d_model)
            self.final_attn = MultiHeadAttention(d_model, num_heads, dropout)

    def _final_parts(self) -> tuple[nn.LayerNorm, MultiHeadAttention]:
        return (self.norm, self.attn) if self.shared else (self.final_norm, self.final_attn)

    def prepare(self, memory: Tensor) -> PreparedRegions:
        """(B, N, D) -> region keys/values for both passes, once per image."""
        first = self.attn.project_kv(memory)
        if self.strategy == "ohc":
            return PreparedRegions(first, None)
        return PreparedRegions(first, (first if self.shared else self.final_attn.project_kv(memory)).contiguous())

    def _final_query(self, q: Tensor, qh: Tensor) -> Tensor:
        return qh if self.shared else self.final_attn.project_q(self.final_norm(q))

    def forward(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D) with R = B * group captions (group per image, image-major), memory_mask
        (B, N), query_mask (R, T) True = real -> c (R, T, D), extras."""
        if query_mask is None:
            query_mask = torch.ones(q.shape[:2], dtype=torch.bool, device=q.device)
        qh = self.attn.project_q(self.norm(q))
        mask = history_mask(query_mask, self.strategy)
        if self._one_score_pass:
            return self._shared_passes(q, qh, prepared, memory_mask, lambda c_tmp: self._entry(c_tmp), mask, group)[:2]
        b = memory_mask.shape[0]
        first, _ = attend(_group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :], self._p)
        c_tmp = q + self.dropout(self.attn.merge(_ungroup_rows(first, group)))
        _, final_attn = self._final_parts()
        return self._final(q, self._final_query(q, qh), prepared.final, memory_mask, self._entry(c_tmp),
                           mask, final_attn, group)

    def step(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, cache: HistoricalContextMemory, group: int):
        """q (R, 1, D) -> c (R, 1, D), the memory with c_tmp_t appended, extras (T = 1)."""
        b = memory_mask.shape[0]
        qh = self.attn.project_q(self.norm(q))  # (R, H, 1, d_k)
        if self._one_score_pass:
            grown = []

            def history(c_tmp):  # append c_tmp_t, then read what the strategy allows
                grown.append(cache.appended(self._entry_kv(c_tmp)))
                return self._visible(cache, grown[0])

            c, extras, _ = self._shared_passes(q, qh, prepared, memory_mask, history, None, group)
            return c, grown[0], extras
        first, _ = attend(_group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :], self._p)
        c_tmp = q + self.dropout(self.attn.merge(_ungroup_rows(first, group)))
        _, final_attn = self._final_parts()
        after = cache.appended(self._entry_kv(c_tmp))
        c, extras = self._final(q, self._final_query(q, qh), prepared.final, memory_mask,
                                self._visible(cache, after), None, final_attn, group)
        return c, after, extras

    @property
    def _one_score_pass(self) -> bool:
        """Shared weights and no attention dropout: both passes from one set of region scores
        (:func:`attend_twice_shared`, exact). With dropout in training each pass draws its own
        mask, so the two passes are computed separately."""
        return self.shared and self._p == 0.0

    def _entry_kv(self, c_tmp: Tensor) -> KeyValue:
        """History entries' keys/values: the final pass's projection of (normalised) c_tmp."""
        final_norm, final_attn = self._final_parts()
        return final_attn.project_kv(final_norm(c_tmp) if self.normalize else c_tmp)

    def _entry(self, c_tmp: Tensor) -> KeyValue:
        return self._entry_kv(c_tmp).contiguous()

    def _shared_passes(self, q, qh, prepared: PreparedRegions, memory_mask, history_of, mask, group):
        """Shared-weight CACA with one set of region scores (:func:`attend_regions`, then
        :func:`attend_after_regions`); ``history_of(c_tmp)`` gives the history keys the final
        pass reads. -> (c, extras, c_tmp)."""
        regions = prepared.first.contiguous() if prepared.final is None else prepared.final
        first = attend_regions(qh, regions, memory_mask, group)
        c_tmp = q + self.dropout(self.attn.merge(first.heads))
        out = attend_after_regions(qh, first, history_of(c_tmp), mask, self.strategy != "ohc")
        return q + self.dropout(self.attn.merge(out.heads)), _extras(out), c_tmp


@CROSS_ATTENTION.register("light_caca")
class LightContextAssistedCrossAttention(_WithHistory):
    """LightCACA: one pass over [regions; q_1..q_t] (see module doc)."""

    def prepare(self, memory: Tensor) -> PreparedRegions:
        """(B, N, D) -> region keys/values, once per image (None for OHC)."""
        return PreparedRegions(None, None if self.strategy == "ohc" else self.attn.project_kv(memory).contiguous())

    def forward(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D) with R = B * group captions, memory_mask (B, N), query_mask (R, T) True =
        real -> c (R, T, D), extras."""
        if query_mask is None:
            query_mask = torch.ones(q.shape[:2], dtype=torch.bool, device=q.device)
        q_ln = self.norm(q)
        qh = self.attn.project_q(q_ln)
        return self._final(q, qh, prepared.final, memory_mask, self.attn.project_kv(q_ln if self.normalize else q).contiguous(),
                           history_mask(query_mask, self.strategy), self.attn, group)

    def step(self, q: Tensor, prepared: PreparedRegions, memory_mask: Tensor, cache: HistoricalContextMemory, group: int):
        """q (R, 1, D) -> c (R, 1, D), the memory with q_t appended, extras (T = 1)."""
        q_ln = self.norm(q)
        qh = self.attn.project_q(q_ln)
        after = cache.appended(self.attn.project_kv(q_ln if self.normalize else q))
        c, extras = self._final(q, qh, prepared.final, memory_mask, self._visible(cache, after), None, self.attn, group)
        return c, after, extras
