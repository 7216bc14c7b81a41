"""Soft (additive) attention of the recurrent captioners, and its context-assisted variants
(SPEC.md §3 "Where CACA plugs in", §5; Bahdanau et al., Xu et al., Anderson et al.).

One attention step of an LSTM decoder, with query h (the hidden state that drives attention:
the attention LSTM's in Up-Down and Look-Back, the previous hidden state in Att2in) and the
embedded regions v_1..v_N of its image:

    e_i = w^T tanh(W_v v_i + W_h h [+ W_c c_prev])     (Look-Back adds the previous context)
    alpha = softmax(e),   c_hat = sum_i alpha_i v_i

Single-head additive attention counts as one head (AWC: N_layers = H = 1, SPEC.md §3).

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

from catcap.models.cross.context_assisted import STRATEGIES
from catcap.models.linear import Linear
from catcap.registry import SOFT_ATTENTION



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
    (None) before the first step."""

    values: Tensor | None = None
    keys: Tensor | None = None

    def appended(self, value: Tensor, key: Tensor) -> "SoftHistory":
        """One more entry per row: value (R, D), key (R, A)."""
        if self.values is None:
            return SoftHistory(value[:, None], key[:, None])
        return SoftHistory(torch.cat([self.values, value[:, None]], 1), torch.cat([self.keys, key[:, None]], 1))

    def index_select(self, index: Tensor) -> "SoftHistory":
        """Rows ``index`` (beam reordering)."""
        if self.values is None:
            return self
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


def _extras(history_weight: Tensor, region_weights: Tensor | None, history_weights: Tensor | None) -> dict:
    """Per-step extras shaped as one layer of one head: a (R, 1, 1), (R, 1, 1, N), (R, 1, 1, M)."""
    lift = (lambda x: None if x is None else x[:, None, None])
    return {"history_weight": history_weight[:, None, None], "region_attention": lift(region_weights),
            "history_attention": lift(history_weights)}


@SOFT_ATTENTION.register("vanilla")
class SoftAttention(nn.Module):
    """Soft attention over the regions (the anchors' attention; see module doc).

    ``prepare(memory)`` once per image; ``forward(h, prepared, memory_mask, cache, group,
    previous)`` is one step for R = B * group rows -> (context (R, D), cache, extras)."""

    def __init__(self, d_model: int, att_hidden: int, look_back: bool = False):
        super().__init__()
        self.score = AdditiveScore(d_model, att_hidden, look_back)

    def prepare(self, memory: Tensor) -> SoftRegions:
        """(B, N, D) or levels (B, L, N, D) (the top level is read) -> values and keys."""
        values = memory[:, -1] if memory.dim() == 4 else memory
        return SoftRegions(values, self.score.key(values))

    def init_cache(self, rows: int):
        return None

    def forward(self, h: Tensor, prepared: SoftRegions, memory_mask: Tensor, cache, group: int = 1,
                previous: Tensor | None = None):
        """h (R, D) -> c_hat (R, D), cache (unchanged), extras ({})."""
        e = self.score.regions(self.score.project_query(h, previous), prepared.keys, memory_mask)
        return read_regions(e.softmax(-1), prepared.values), cache, {}


class _WithHistory(SoftAttention):
    """What CACA and LightCACA share: the strategy, the cache and the final pass."""

    def __init__(self, d_model: int, att_hidden: int, look_back: bool = False, strategy: str = "chc"):
        super().__init__(d_model, att_hidden, look_back)
        if strategy not in STRATEGIES:
            raise ValueError(f"history strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy

    def init_cache(self, rows: int) -> SoftHistory:
        return SoftHistory()

    def _visible(self, before: SoftHistory, after: SoftHistory) -> SoftHistory:
        """Entries the final pass reads: up to t-1 for ``ihc``, up to t otherwise."""
        return before if self.strategy == "ihc" else after

    def _final(self, q: Tensor, score: AdditiveScore, e_x: Tensor, read_x: Tensor, history: SoftHistory):
        """One softmax over [regions; history] from the region scores e_x (R, N) and their read
        (R, D) -> (c (R, D), extras). Without entries (IHC's first step) it is the region read."""
        alpha_x = e_x.softmax(-1)
        if history.values is None:
            return read_x, _extras(read_x.new_zeros(read_x.shape[0]), alpha_x, None)
        e_h = score.entries(q, history.keys)  # (R, M)
        alpha_h = e_h.softmax(-1)
        read_h = (alpha_h[:, None] @ history.values)[:, 0]  # (R, D)
        if self.strategy == "ohc":
            return read_h, _extras(torch.ones_like(read_h[:, 0]), None, alpha_h)
        a = torch.sigmoid(torch.logsumexp(e_h, -1) - torch.logsumexp(e_x, -1))  # (R,)
        c = torch.lerp(read_x, read_h, a[:, None].to(read_x.dtype))  # one dtype under autocast
        return c, _extras(a, alpha_x * (1 - a[:, None]), alpha_h * a[:, None])


@SOFT_ATTENTION.register("caca")
class ContextAssistedSoftAttention(_WithHistory):
    """CACA with soft attention: first pass over the regions, final pass over [regions; c_hat_1..t]."""

    def __init__(self, d_model: int, att_hidden: int, look_back: bool = False, strategy: str = "chc",
                 shared: bool = True):
        super().__init__(d_model, att_hidden, look_back, strategy)
        self.shared = shared
        if not shared:
            self.final_score = AdditiveScore(d_model, att_hidden, look_back)

    def _final_score(self) -> AdditiveScore:
        return self.score if self.shared else self.final_score

    def prepare(self, memory: Tensor) -> SoftRegions:
        regions = super().prepare(memory)
        if not self.shared:
            regions.final_keys = self.final_score.key(regions.values)
        return regions

    def forward(self, h: Tensor, prepared: SoftRegions, memory_mask: Tensor, cache: SoftHistory, group: int = 1,
                previous: Tensor | None = None):
        """h (R, D) -> c_t (R, D), the memory with c_hat_t appended, extras."""
        q = self.score.project_query(h, previous)
        e_x = self.score.regions(q, prepared.keys, memory_mask)
        alpha = e_x.softmax(-1)
        c_hat = read_regions(alpha, prepared.values)  # first pass
        score = self._final_score()
        # the entry's key W_v c_hat + b = sum_i alpha_i (W_v v_i + b), as the weights sum to 1:
        # read from the region keys (N x A products per row) instead of projected (D x A)
        keys = prepared.keys if self.shared else prepared.final_keys
        after = cache.appended(c_hat, read_regions(alpha, keys))
        if not self.shared:  # the final pass scores the regions with its own weights
            q = score.project_query(h, previous)
            e_x = score.regions(q, prepared.final_keys, memory_mask)
            c_hat = read_regions(e_x.softmax(-1), prepared.values)
        c, extras = self._final(q, score, e_x, c_hat, self._visible(cache, after))
        return c, after, extras


@SOFT_ATTENTION.register("light_caca")
class LightContextAssistedSoftAttention(_WithHistory):
    """LightCACA with soft attention: one pass over [regions; h_1..h_t]."""

    def forward(self, h: Tensor, prepared: SoftRegions, memory_mask: Tensor, cache: SoftHistory, group: int = 1,
                previous: Tensor | None = None):
        """h (R, D) -> c_t (R, D), the memory with h_t appended, extras."""
        q = self.score.project_query(h, previous)
        e_x = self.score.regions(q, prepared.keys, memory_mask)
        after = cache.appended(h, self.score.key(h))
        read_x = read_regions(e_x.softmax(-1), prepared.values)
        c, extras = self._final(q, self.score, e_x, read_x, self._visible(cache, after))
        return c, after, extras
