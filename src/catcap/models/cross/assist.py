"""CACA and LightCACA: one strategy that every cross-attention family runs (SPEC.md §3).

At step t of an attention layer with query q_t and regions X (the model ``vanilla`` leaves out):

    c_tmp_t = first pass over X                                 CACA's entry: the step's context
    HCM_t   = [e_1; ..; e_t]                                    e = c_tmp (CACA) or q (LightCACA)
    c_t     = final pass over [X; HCM_t], one softmax           the step's output

:class:`ContextAssist` holds every choice the paper's ablations vary and runs the passes in one
place (:meth:`ContextAssist.step`, and :meth:`ContextAssist.forward` for all positions at once):

- ``light``: LightCACA (one pass, the history holds the queries) or CACA (two passes);
- ``strategy`` (Table 5): ``chc`` the final pass reads [X; entries 1..t], ``ihc`` [X; 1..t-1],
  ``ohc`` entries 1..t alone;
- ``shared`` (Table 6, CACA): both passes use the same weights (no parameters beyond the
  family's vanilla attention), or the final pass has its own;
- ``normalize``: an entry goes through the reading pass's LayerNorm (pre-norm Transformer
  decoders; docs/cat.md), or is the literal residual-stream vector;
- ``placement`` (M2's meshed decoder): one history per encoder level, or one after the gates.

The attention *family* supplies what differs between decoders: how a query is made, how a
pass over the regions is computed, what an entry is, how the final pass combines regions and
history and what it returns. Families: :class:`~catcap.models.cross.transformer.TransformerCrossAttention`
(the Transformer and M2 decoders), :class:`~catcap.models.cross.soft.SoftAttention` (Att2in,
Up-Down, Look-Back) and :class:`~catcap.models.cross.aoa.HeadAttention` (AoANet). A family
implements

    query(q, final=False)                 the first (or the final pass's own) query
    first_pass(query, prepared, memory_mask, group, keep)   regions pass of CACA; ``keep``: the
                                          final pass will reuse it, so keep its scores
    context_entry(q, query, first, prepared, group, assist) / query_entry(q, query, assist)
    region_pass(query, prepared, memory_mask, group, assist)   a fresh region pass for the final
                                          pass, or None to have it attend over the concatenation
    final_pass(q, query, regions, prepared, memory_mask, history, mask, group, assist) -> (c, extras)
    attention_dropout                     the dropout on attention weights now (0 in eval)

The final pass reuses the first pass when the weights are shared and no attention dropout
applies (the region scores are then the same: ``c = (1 - a) first + a history``, exact); else
it is computed anew. ``history`` is the entries the final pass may read — all of them with a
(B, 1, T, M) ``mask`` in :meth:`forward`, the visible ones of the decoding memory (mask None)
in :meth:`step` — or None where there are none yet (IHC's first step). Decoding memories expose
what attention reads as ``entries`` (:mod:`catcap.models.cross.memory`, ``SoftHistory``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from catcap.registry import CROSS_ATTENTION

STRATEGIES = ("chc", "ihc", "ohc")
PLACEMENTS = ("per_level", "gated")


@dataclass(frozen=True)
class ContextAssist:
    """CACA (``light=False``) or LightCACA (``light=True``) with its options (see module doc)."""

    light: bool = False
    strategy: str = "chc"
    shared: bool = True
    normalize: bool = True
    placement: str = "per_level"

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"history strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"history placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")

    @property
    def regions_in_final(self) -> bool:
        """Whether the final pass reads the regions (all but OHC)."""
        return self.strategy != "ohc"

    @property
    def separate_final(self) -> bool:
        """Whether the final pass has weights of its own (CACA, not shared)."""
        return not self.light and not self.shared

    def visible(self, before, after):
        """The memory the final pass reads at a decoding step: up to t-1 for ``ihc``, else up to t."""
        return before if self.strategy == "ihc" else after

    def history_mask(self, query_mask: Tensor) -> Tensor:
        """(R, T) True = real position -> (R, 1, T, T): query t may read entry s when s <= t
        (``ihc``: s < t) and s is a real position. A padded query sees its own entry, so that no
        row is empty (its output is never used)."""
        t = query_mask.shape[1]
        steps = torch.ones(t, t, dtype=torch.bool, device=query_mask.device)
        allowed = steps.tril(-1 if self.strategy == "ihc" else 0)[None] & query_mask[:, None, :]
        allowed = allowed | (torch.eye(t, dtype=torch.bool, device=query_mask.device)[None] & ~query_mask[:, :, None])
        return allowed[:, None]

    def forward(self, att, q, prepared, memory_mask: Tensor, query_mask: Tensor, group: int):
        """All positions at once (teacher forcing): every entry, masked by :meth:`history_mask`
        -> (c, extras)."""
        return self._passes(att, q, prepared, memory_mask, group, lambda entry: entry, self.history_mask(query_mask))

    def step(self, att, q, prepared, memory_mask: Tensor, cache, group: int):
        """One decoding step: the step's entry is appended to ``cache`` -> (c, grown cache, extras)."""
        grown = []

        def history_of(entry):
            grown.append(cache.appended(entry))
            return self.visible(cache, grown[0]).entries

        c, extras = self._passes(att, q, prepared, memory_mask, group, history_of, None)
        return c, grown[0], extras

    def _passes(self, att, q, prepared, memory_mask, group, history_of, mask):
        query = att.query(q)
        final_query = att.query(q, final=True) if self.separate_final else query
        reuse = self.shared and not self.light and att.attention_dropout == 0.0
        if self.light:
            first, entry = None, att.query_entry(q, query, self)
        else:
            first = att.first_pass(query, prepared, memory_mask, group, keep=reuse)
            entry = att.context_entry(q, query, first, prepared, group, self)
        history = history_of(entry)
        regions = first if reuse else None
        if regions is None and att.attention_dropout == 0.0 and self.regions_in_final:
            regions = att.region_pass(final_query, prepared, memory_mask, group, self)
        return att.final_pass(q, final_query, regions, prepared, memory_mask, history, mask, group, self)


@CROSS_ATTENTION.register("vanilla")
def vanilla() -> None:
    """The family's plain attention over the regions (TCA): no history."""
    return None


@CROSS_ATTENTION.register("caca")
def caca(strategy: str = "chc", shared: bool = True, normalize: bool = True,
         placement: str = "per_level") -> ContextAssist:
    """CACA: first pass over the regions, final pass over [regions; c_tmp_1..t]."""
    return ContextAssist(False, strategy, shared, normalize, placement)


@CROSS_ATTENTION.register("light_caca")
def light_caca(strategy: str = "chc", normalize: bool = True) -> ContextAssist:
    """LightCACA: one pass over [regions; q_1..q_t]."""
    return ContextAssist(True, strategy, True, normalize)
