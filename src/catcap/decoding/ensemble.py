"""Several caption models decoding as one: at every step their next-token log-probabilities
are combined, and one search (greedy, sampling, beam or diverse beam) runs over the result.

:class:`EnsembleModel` has the decoding protocol of
:class:`~catcap.models.caption_model.CaptionModel`, so :func:`~catcap.decoding.generate` runs it
like any model. Each member keeps its own decoder state (:class:`EnsembleState`), reordered with
the beams; members may be of any family (Transformer, CAT, M2, Up-Down, ...) and may read
different features: ``encode`` takes one (features, mask) pair per member, or one pair that
every member reads.

How the members' distributions are combined (``combine``):

* ``"mean_log_prob"`` (the default): the mean of the members' log-probabilities, renormalised,
  ``log p(w) = (1/M) sum_m log p_m(w) - log Z``: a normalised geometric mean (a product of
  experts); a token one member finds unlikely is held down.
* ``"mean_prob"``: the log of the mean probability, ``log (1/M) sum_m p_m(w)``: a mixture, as
  self-critical.pytorch's ``AttEnsemble`` (and fairseq) combine.

Both give a distribution over the vocabulary, so the summed scores of a beam are
log-probabilities of the ensemble. The Flickr8k val comparison of the two is in
benchmarks/flickr8k.md. Legend: M members, R rows, V vocab.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from catcap.decoding.greedy import check_inputs

COMBINE = ("mean_log_prob", "mean_prob")


@dataclass
class EnsembleState:
    """Every member's decoder state; rows reorder together."""

    states: tuple

    def reorder(self, index: Tensor, group: int | None = None) -> "EnsembleState":
        return EnsembleState(tuple(s.reorder(index, group) for s in self.states))

    def reserved(self, capacity: int) -> "EnsembleState":
        return EnsembleState(tuple(s.reserved(capacity) for s in self.states))


class EnsembleModel:
    """Members with the decoding protocol, combined at every step (module doc). The members
    must share ``<bos>``, ``<eos>`` and ``<pad>`` ids and their vocabulary (checked by the
    caller that knows it, :class:`catcap.inference.ensemble.Ensemble`)."""

    def __init__(self, models, combine: str = "mean_log_prob"):
        self.models = list(models)
        if not self.models:
            raise ValueError("an ensemble needs at least one model")
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {', '.join(COMBINE)}, got {combine!r}")
        ids = {(m.bos_id, m.eos_id, m.pad_id) for m in self.models}
        if len(ids) > 1:
            raise ValueError(f"the members use different <bos>/<eos>/<pad> ids {sorted(ids)}: an ensemble needs "
                             "one vocabulary")
        (self.bos_id, self.eos_id, self.pad_id), = ids
        self.combine = combine

    def _per_member(self, features, feature_mask) -> list[tuple[Tensor, Tensor]]:
        if isinstance(features, Tensor):
            return [(features, feature_mask)] * len(self.models)
        if len(features) != len(self.models) or len(feature_mask) != len(self.models):
            raise ValueError(f"an ensemble of {len(self.models)} models needs one features tensor and one mask "
                             f"per member (or one of each for all), got {len(features)} and {len(feature_mask)}")
        return list(zip(features, feature_mask))

    def check_inputs(self, features, feature_mask) -> int:
        """Every member's (B, N_m, F_m) features and (B, N_m) mask checked; returns B."""
        sizes = {check_inputs(f, m) for f, m in self._per_member(features, feature_mask)}
        if len(sizes) > 1:
            raise ValueError(f"the members' features hold different numbers of images {sorted(sizes)}")
        return sizes.pop()

    def encode(self, features, feature_mask):
        pairs = [m.encode(f, mask) for m, (f, mask) in zip(self.models, self._per_member(features, feature_mask))]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)

    def init_state(self, memory, memory_mask, group: int = 1) -> EnsembleState:
        return EnsembleState(tuple(m.init_state(mem, mask, group) for m, mem, mask in
                                   zip(self.models, memory, memory_mask)))

    def step(self, tokens: Tensor, state: EnsembleState) -> tuple[Tensor, EnsembleState]:
        """Every member's step on the same tokens -> the combined log-probabilities (R, V)."""
        log_probs, states = [], []
        for model, member_state in zip(self.models, state.states):
            logits, member_state = model.step(tokens, member_state)
            log_probs.append(logits.float().log_softmax(dim=-1))
            states.append(member_state)
        stacked = torch.stack(log_probs)
        if self.combine == "mean_log_prob":
            combined = stacked.mean(dim=0)  # the loop's log_softmax renormalises it
        else:
            combined = torch.logsumexp(stacked, dim=0) - math.log(len(self.models))
        return combined, EnsembleState(tuple(states))
