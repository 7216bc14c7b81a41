"""Soft (additive) attention of the recurrent captioners, and its context-assisted variants
(SPEC.md §3 "Where CACA plugs in", §5; Bahdanau et al., Xu et al., Anderson et al.).

One attention step of an LSTM decoder, with query h (the hidden state that drives attention:
the attention LSTM's in Up-Down and Look-Back, the previous hidden state in Att2in) and the
embedded regions v_1..v_N of its image:

    e_i = w^T tanh(W_v v_i + W_h h [+ W_c c_prev])     (Look-Back adds the previous context)
    alpha = softmax(e),   c_hat = sum_i alpha_i v_i

Single-head additive attention counts as one head (AWC: N_layers = H = 1, SPEC.md §3).

:class:`SoftAttention` is this family's attention; the ``model.cross_attention`` variants
(:class:`~catcap.models.cross.assist.ContextAssist`) run in it as in every other family.
CACA (``caca``): the first pass is the attention above; its context ``c_hat_t`` is appended to
the historical context memory ``HCM_t = [c_hat_1; ..; c_hat_t]`` and the final pass scores the
same query against ``[regions; HCM_t]`` with the same function (shared weights, no new
parameters). Writing ``lse`` for logsumexp, one softmax over both blocks is

    c_t = (1 - a) * softmax(e_X) V_X + a * softmax(e_H) HCM,   a = sigmoid(lse(e_H) - lse(e_X))

so a shared final pass reuses the first pass's region scores and read (``a`` is the history
weight AWC constrains). Strategies as in the Transformer: ``chc`` entries 1..t, ``ihc`` 1..t-1
(the first step then reads the regions only), ``ohc`` the history alone (a = 1).
``shared=False`` gives the final pass its own W_v, W_h (W_c), w.
LightCACA (``light_caca``): one pass over ``[regions; h_1..h_t]``, the memory holds the queries.

History entries are stored projected (the key ``W_v entry`` beside the entry itself), once,
when appended; a CACA entry's key is read from the region keys with the first pass's weights
(``W_v c_hat + b = sum_i alpha_i (W_v v_i + b)``, exact because the weights sum to 1), which
costs N x A products per row instead of D x A. There is no residual and no LayerNorm here: a context is a convex combination
of regions, so entries have the regions' scale (the Transformer's ``normalize`` option does
not apply). Legend: B images, G hypotheses per image, R = B * G rows, N regions, D width of
regions, contexts and hidden states, A attention hidden size, M history entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.models.cross.assist import ContextAssist
from catcap.models.linear import Linear


@dataclass
class SoftRegions:
    """Regions of B images prepared once: ``values`` (B, N, D), ``keys`` W_v v (B, N, A), and
    the final pass's keys when it has its own weights (else None)."""

    values: Tensor
    keys: Tensor
    final_keys: Tensor | None = None


@dataclass
class SoftHistory:
    """The HCM of a recurrent decoder: entries (R, M, D) and their keys (R, M, A); empty
    (None) before the first step. ``capacity`` (static decoding, :meth:`reserve`): the entries
    live in (R, capacity, D) and (R, capacity, A) ``buffers`` allocated at the first write, and a
    step writes its entry in place (without autograd); ``values``/``keys`` are views of them."""

    values: Tensor | None = None
    keys: Tensor | None = None
    capacity: int = 0
    buffers: tuple[Tensor, Tensor] | None = None

    def reserve(self, capacity: int) -> "SoftHistory":
        if self.values is not None:
            raise ValueError("reserve a decoding memory before its first step")
        return SoftHistory(capacity=capacity)

    def appended(self, entry: "SoftHistory") -> "SoftHistory":
        """One more entry per row: ``entry`` holds values (R, 1, D) and keys (R, 1, A)."""
        in_place = self.capacity and not (torch.is_grad_enabled() and entry.values.requires_grad)
        if in_place:
            buffers = self.buffers or tuple(x.new_empty(x.shape[0], self.capacity, x.shape[2])
                                            for x in (entry.values, entry.keys))
            t = self.length
            buffers[0][:, t:t + 1], buffers[1][:, t:t + 1] = entry.values, entry.keys
            return SoftHistory(buffers[0][:, :t + 1], buffers[1][:, :t + 1], self.capacity, buffers)
        if self.values is None:
            return entry
        return SoftHistory(torch.cat([self.values, entry.values], 1), torch.cat([self.keys, entry.keys], 1))

    @property
    def entries(self) -> "SoftHistory | None":
        """What attention reads: the memory itself, None while it is empty."""
        return None if self.values is None else self

    def index_select(self, index: Tensor) -> "SoftHistory":
        """Rows ``index`` (beam reordering; with buffers: into new buffers of the same capacity)."""
        if self.values is None:
            return self
        if self.buffers is not None:
            buffers = tuple(b.index_select(0, index) for b in self.buffers)
            t = self.length
            return SoftHistory(buffers[0][:, :t], buffers[1][:, :t], self.capacity, buffers)
        return SoftHistory(self.values.index_select(0, index), self.keys.index_select(0, index))

    @property
    def length(self) -> int:
        return 0 if self.values is None else self.values.shape[1]


class AdditiveScore(nn.Module):
    """``e = w^T tanh(W_v v + W_h h [+ W_c c_prev])`` (``look_back`` adds W_c)."""

    def __init__(self, d_model: int, att_hidden: int, look_back: bool = False):
        super().__init__()
        self.key = Linear(d_model, att_hidden)
        self.query = Linear(d_model, att_hidden)
        self.previous = Linear(d_model, att_hidden, bias=False) if look_back else None
        self.w = nn.Parameter(torch.empty(att_hidden).uniform_(-1 / math.sqrt(att_hidden), 1 / math.sqrt(att_hidden)))

    def project_query(self, h: Tensor, previous: Tensor | None = None) -> Tensor:
        """h (R, D) [and the previous context (R, D)] -> (R, A)."""
        q = self.query(h)
        if self.previous is not None:
            if previous is None:
                raise ValueError("Look-Back attention needs the previous step's context")
            q = q + self.previous(previous)
        return q

    def regions(self, q: Tensor, keys: Tensor, mask: Tensor) -> Tensor:
        """q (R, A) against the keys (B, N, A) of each row's image, mask (B, N) -> scores (R, N)
        (-inf at padded regions); the G rows of an image share its keys (no copies)."""
        b, n, a = keys.shape
        s = (keys[:, None] + q.view(b, -1, 1, a)).tanh_() @ self.w  # (B, G, N); tanh in place: one (B, G, N, A) buffer
        return s.masked_fill_(~mask[:, None], float("-inf")).view(-1, n)

    def entries(self, q: Tensor, keys: Tensor) -> Tensor:
        """q (R, A) against per-row history keys (R, M, A) -> scores (R, M)."""
        return (keys + q[:, None]).tanh_() @ self.w


def read_regions(weights: Tensor, values: Tensor) -> Tensor:
    """weights (R, N) over each row's image regions (B, N, D) -> (R, D)."""
    b, n, d = values.shape
    return (weights.view(b, -1, n) @ values).view(-1, d)


@dataclass
class SoftPass:
    """One pass of a query over its image's regions: scores e (R, N), their softmax (R, N) and
    the read context sum_i alpha_i v_i (R, D)."""

    scores: Tensor
    weights: Tensor
    read: Tensor


def _extras(history_weight: Tensor, region_weights: Tensor | None, history_weights: Tensor | None) -> dict:
    """Per-step extras shaped as one layer of one head: a (R, 1, 1), (R, 1, 1, N), (R, 1, 1, M)."""
    lift = (lambda x: None if x is None else x[:, None, None])
    return {"history_weight": history_weight[:, None, None], "region_attention": lift(region_weights),
            "history_attention": lift(history_weights)}


class SoftAttention(nn.Module):
    """Soft attention over the regions (the anchors' attention; see module doc), made CACA or
    LightCACA by ``history`` (:class:`~catcap.models.cross.assist.ContextAssist`, None: plain).

    ``prepare(memory)`` once per image; ``forward(h, prepared, memory_mask, cache, group,
    previous)`` is one step for R = B * group rows -> (context (R, D), cache, extras)."""

    #: the ``model.history`` options this family can vary
    history_options = frozenset({"strategy", "shared"})
    attention_dropout = 0.0  # no dropout on the attention weights (the anchors have none)

    def __init__(self, d_model: int, att_hidden: int, look_back: bool = False, history: ContextAssist | None = None):
        super().__init__()
        self.history = history
        self.score = AdditiveScore(d_model, att_hidden, look_back)
        if history is not None and history.separate_final:
            self.final_score = AdditiveScore(d_model, att_hidden, look_back)

    def _score(self, final: bool) -> AdditiveScore:
        return self.final_score if final and self.history.separate_final else self.score

    def prepare(self, memory: Tensor) -> SoftRegions:
        """(B, N, D) or levels (B, L, N, D) (the top level is read) -> values and keys (and the
        final pass's own keys)."""
        values = memory[:, -1] if memory.dim() == 4 else memory
        regions = SoftRegions(values, self.score.key(values))
        if self.history is not None and self.history.separate_final:
            regions.final_keys = self.final_score.key(values)
        return regions

    def init_cache(self, rows: int) -> SoftHistory | None:
        return None if self.history is None else SoftHistory()

    def forward(self, h: Tensor, prepared: SoftRegions, memory_mask: Tensor, cache, group: int = 1,
                previous: Tensor | None = None):
        """h (R, D) -> the context (R, D), the cache (with this step's entry), extras ({} without
        a history)."""
        if self.history is not None:
            return self.history.step(self, (h, previous), prepared, memory_mask, cache, group)
        e = self.score.regions(self.score.project_query(h, previous), prepared.keys, memory_mask)
        return read_regions(e.softmax(-1), prepared.values), cache, {}

    # --- the passes ContextAssist runs (catcap.models.cross.assist); q = (h, previous) ---

    def query(self, q: tuple[Tensor, Tensor | None], final: bool = False) -> Tensor:
        """The projected query W_h h [+ W_c c_prev] (R, A) of the first or the final pass."""
        return self._score(final).project_query(*q)

    def _pass(self, query: Tensor, prepared: SoftRegions, memory_mask: Tensor, final: bool) -> SoftPass:
        """The query over the regions with the first pass's weights, or the final pass's own."""
        separate = final and self.history.separate_final
        score, keys = (self.final_score, prepared.final_keys) if separate else (self.score, prepared.keys)
        e = score.regions(query, keys, memory_mask)
        alpha = e.softmax(-1)
        return SoftPass(e, alpha, read_regions(alpha, prepared.values))

    def first_pass(self, query: Tensor, prepared: SoftRegions, memory_mask: Tensor, group: int, keep: bool) -> SoftPass:
        return self._pass(query, prepared, memory_mask, final=False)

    def context_entry(self, q, query: Tensor, first: SoftPass, prepared: SoftRegions, group: int,
                      assist: ContextAssist) -> SoftHistory:
        """CACA's entry: the context c_hat and its key under the final pass's weights, read from
        the region keys (W_v c_hat + b = sum_i alpha_i (W_v v_i + b), as the weights sum to 1)."""
        key = read_regions(first.weights, prepared.final_keys if assist.separate_final else prepared.keys)
        return SoftHistory(first.read[:, None], key[:, None])

    def query_entry(self, q, query: Tensor, assist: ContextAssist) -> SoftHistory:
        """LightCACA's entry: the query state h and its key."""
        h = q[0]
        key = self.score.key(h)
        return SoftHistory(h[:, None], key[:, None])

    def region_pass(self, query: Tensor, prepared: SoftRegions, memory_mask: Tensor, group: int,
                    assist: ContextAssist) -> SoftPass:
        return self._pass(query, prepared, memory_mask, final=True)

    def final_pass(self, q, query: Tensor, regions: SoftPass | None, prepared: SoftRegions, memory_mask: Tensor,
                   history: SoftHistory | None, mask, group: int, assist: ContextAssist):
        """One softmax over [regions; history] from the region pass -> (c (R, D), extras); OHC
        reads the history alone, IHC's first step (no entries) the regions alone."""
        if history is None:
            return regions.read, _extras(regions.read.new_zeros(regions.read.shape[0]), regions.weights, None)
        e_h = self._score(final=True).entries(query, history.keys)  # (R, M)
        alpha_h = e_h.softmax(-1)
        read_h = (alpha_h[:, None] @ history.values)[:, 0]  # (R, D)
        if not assist.regions_in_final:
            return read_h, _extras(torch.ones_like(read_h[:, 0]), None, alpha_h)
        a = torch.sigmoid(torch.logsumexp(e_h, -1) - torch.logsumexp(regions.scores, -1))  # (R,)
        c = torch.lerp(regions.read, read_h, a[:, None].to(regions.read.dtype))  # one dtype under autocast
        return c, _extras(a, regions.weights * (1 - a[:, None]), alpha_h * a[:, None])
