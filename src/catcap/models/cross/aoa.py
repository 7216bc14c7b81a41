"""Attention on attention (AoA) and the multi-head attention of AoANet's decoder, with its
context-assisted variants (Huang et al. 2019; SPEC.md §3, §5).

AoA refines what an attention returned with the query that asked for it,

    AoA(f, Q) = sigmoid(W_q^g Q + W_v^g f + b^g) * (W_q^i Q + W_v^i f + b^i),

a GLU over ``[f; Q]`` (:class:`AttentionOnAttention`). AoANet uses it around multi-head
attention in the refiner (:mod:`catcap.models.encoders.aoa`) and in the decoder
(:mod:`catcap.models.decoders.aoa`), whose attention step is the module family here: from the
attention LSTM's state h, ``q = W_q LN(h)``, keys and values ``W_k A``, ``W_v A`` of the refined
regions A projected once per image, scaled dot-product attention per head, heads concatenated
(no output layer: AoA follows). :class:`HeadAttention` is this family's attention; the
``model.cross_attention`` variants (:class:`~catcap.models.cross.assist.ContextAssist`: vanilla,
CACA, LightCACA) run in it as in every other family.

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
(evaluation, decoding) a shared final pass reuses the first pass's region scores and
LightCACA's is computed block by block (:func:`~catcap.models.cross.history.attend_after_regions`,
exact); an unshared CACA's final pass is one softmax over the concatenation.
Legend: B images, G hypotheses per image, R = B * G rows, N regions, D width, H heads,
d_k = D / H, M history entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.history import (RegionPass, attend_after_regions, attend_regions, attend_with_history,
                                         group_rows, history_extras, ungroup_rows)
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.linear import Linear

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


class HeadAttention(nn.Module):
    """AoANet's decoder attention (see module doc), made CACA or LightCACA by ``history``
    (:class:`~catcap.models.cross.assist.ContextAssist`, None: plain): ``prepare(memory)`` once
    per image; ``forward(h, prepared, memory_mask, cache, group)`` is one step of R = B * group
    rows -> (heads concatenated (R, D), cache, extras)."""

    #: the ``model.history`` options this family can vary
    history_options = frozenset({"strategy", "shared"})

    def __init__(self, d_model: int, num_heads: int, dropout: float = ATTENTION_DROPOUT,
                 history: ContextAssist | None = None):
        super().__init__()
        self.history = history
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout, output=False)
        if history is not None and history.separate_final:
            self.final_norm = nn.LayerNorm(d_model)
            self.final_attn = MultiHeadAttention(d_model, num_heads, dropout, output=False)

    @property
    def attention_dropout(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def prepare(self, memory: Tensor) -> HeadRegions:
        """(B, N, D) or levels (B, L, N, D) (the top level is read) -> values, keys/values (and
        the final pass's own)."""
        values = memory[:, -1] if memory.dim() == 4 else memory
        regions = HeadRegions(values, self.attn.project_kv_levels(values))
        if self.history is not None and self.history.separate_final:
            regions.final = self.final_attn.project_kv_levels(values)
        return regions

    def init_cache(self, rows: int):
        return None if self.history is None else HistoricalContextMemory()

    def forward(self, h: Tensor, prepared: HeadRegions, memory_mask: Tensor, cache, group: int = 1,
                previous: Tensor | None = None):
        """h (R, D) -> the heads concatenated (R, D), the cache (with this step's entry), extras."""
        if self.history is not None:
            return self.history.step(self, h, prepared, memory_mask, cache, group)
        _, qh = self.query(h)
        b = memory_mask.shape[0]
        heads, _ = attend(group_rows(qh, b, group), prepared.first.k, prepared.first.v, memory_mask[:, None, :],
                          self.attention_dropout)
        return concat_heads(ungroup_rows(heads, group)), cache, {}

    def _final_regions(self, prepared: HeadRegions, assist: ContextAssist) -> KeyValue:
        return prepared.final if assist.separate_final else prepared.first

    # --- the passes ContextAssist runs (catcap.models.cross.assist) ---

    def query(self, h: Tensor, final: bool = False) -> tuple[Tensor, Tensor]:
        """h (R, D) -> LN(h) (R, D) and its projection (R, H, 1, d_k), with the first pass's
        LayerNorm and W_q or the final pass's own."""
        norm, attn = (self.final_norm, self.final_attn) if final and self.history.separate_final else (self.norm, self.attn)
        q_ln = norm(h)
        return q_ln, attn.project_q(q_ln[:, None])

    def first_pass(self, query, prepared: HeadRegions, memory_mask: Tensor, group: int, keep: bool) -> RegionPass:
        """The first pass over the regions, without dropout (its weights make the entries)."""
        return attend_regions(query[1], prepared.first, memory_mask, group)

    def context_entry(self, h: Tensor, query, first: RegionPass, prepared: HeadRegions, group: int,
                      assist: ContextAssist) -> KeyValue:
        """Each head's mixture ``sum_i alpha^h_i A_i`` under the reading pass's projections:
        keys ``alpha^h K^h`` and values ``alpha^h V^h`` (R, H, 1, d_k); with shared weights the
        value is the first pass's head output."""
        regions = self._final_regions(prepared, assist)
        alpha = group_rows(first.weights, regions.k.shape[0], group)  # (B, H, G, N)
        value = ungroup_rows(alpha @ regions.v, group) if assist.separate_final else first.heads
        return KeyValue(ungroup_rows(alpha @ regions.k, group), value)

    def query_entry(self, h: Tensor, query, assist: ContextAssist) -> KeyValue:
        """LightCACA's entry: the normalised query LN(h_t), projected by W_k, W_v (R, H, 1, d_k)."""
        return self.attn.project_kv_levels(query[0][:, None])

    def region_pass(self, query, prepared: HeadRegions, memory_mask: Tensor, group: int,
                    assist: ContextAssist) -> RegionPass | None:
        """A region pass for the final pass of LightCACA; an unshared CACA's final pass attends
        over the concatenation instead (None)."""
        return None if assist.separate_final else attend_regions(query[1], prepared.first, memory_mask, group)

    def final_pass(self, h: Tensor, query, regions: RegionPass | None, prepared: HeadRegions, memory_mask: Tensor,
                   history: KeyValue | None, mask, group: int, assist: ContextAssist):
        """One softmax over [regions; history] (history alone for OHC) -> (heads (R, D), extras)."""
        if regions is not None:
            out = attend_after_regions(query[1], regions, history, None, regions_in_final=assist.regions_in_final)
        else:
            out = attend_with_history(query[1], self._final_regions(prepared, assist) if assist.regions_in_final else None,
                                      memory_mask, history, None, group, self.attention_dropout)
        return concat_heads(out.heads), history_extras(out)
