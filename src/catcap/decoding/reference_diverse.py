"""Uncached reference diverse beam search: the oracle :class:`catcap.decoding.beam.BeamSearch`
with ``num_beam_groups > 1`` is tested against (tests only).

Written out as the definition reads (Vijayakumar et al. 2018, Hamming diversity, with Hugging
Face's bookkeeping), one image at a time, plain Python over candidate lists: the K beams of an
image are G groups of K' = K / G. At every step every beam's next-token log-probabilities come
from the full teacher-forced forward (:func:`~catcap.decoding.reference.next_log_probs`); then
group by group, each candidate's score is its beam's score + log p(token) - ``diversity_penalty``
x (how many open beams of the earlier groups took that token at this step), and the group goes
on as a beam search of width K' with its own pool of K' finished captions. A beam's score keeps
the penalties it collected; finished captions are ranked by ``score / length ** alpha``. The
image's captions are the best of all groups' pools. Like the plain reference it never stops
early. It shares the hypothesis record, the rules and the length penalty with
:mod:`catcap.decoding.reference` and none of the batched search's code.
"""

from __future__ import annotations

import torch
from torch import Tensor

from catcap.decoding.output import GenerationOutput
from catcap.decoding.reference import Hypothesis, _advance, _as_output, forbidden_tokens, next_log_probs


@torch.no_grad()
def reference_diverse_beam_search(model, features: Tensor, feature_mask: Tensor, beam_size: int, groups: int,
                                  diversity_penalty: float, max_len: int = 16, length_penalty: float = 0.0,
                                  rules: dict | None = None, num_return: int = 1) -> GenerationOutput:
    """The ``num_return`` best captions per image of a diverse beam search (module doc); the
    output's ``log_probs`` hold the penalised sums (the scores before the length penalty)."""
    outputs = []
    for b in range(features.shape[0]):
        pools = _search_image(model, features[b:b + 1], feature_mask[b:b + 1], beam_size // groups, groups,
                              diversity_penalty, max_len, length_penalty, dict(rules or {}))
        ranked = sorted((h for pool in pools for h in pool), key=lambda h: -float(h.score))  # stable: group order
        outputs.extend(ranked[:num_return])
    return _as_output(outputs, model.pad_id, num_return)


def _search_image(model, features, feature_mask, k, groups, penalty, max_len, alpha, rules) -> list[list[Hypothesis]]:
    beams = [[Hypothesis()] for _ in range(groups)]
    pools: list[list[Hypothesis]] = [[] for _ in range(groups)]
    for step in range(max_len + 1):
        every = [h for group in beams for h in group]
        if not every:
            break
        prefixes = torch.tensor([h.tokens for h in every], dtype=torch.long, device=features.device)
        rows = len(every)
        log_probs = next_log_probs(model, features.expand(rows, -1, -1), feature_mask.expand(rows, -1),
                                   prefixes.view(rows, step)).cpu()
        taken = torch.zeros(log_probs.shape[1])  # open beams of the earlier groups, per token
        first = 0
        for g in range(groups):
            group, lp = beams[g], log_probs[first:first + len(beams[g])]
            first += len(group)
            if not group:
                continue
            candidates = []  # (score, beam, token), beam-major
            for i, hyp in enumerate(group):
                totals = hyp.total + lp[i]
                if g > 0:
                    totals = totals - penalty * taken
                if step == max_len:  # only <eos>, whatever the rules say
                    allowed = [model.eos_id]
                else:
                    forbidden = forbidden_tokens(hyp.tokens, model.eos_id, **rules)
                    allowed = [v for v in range(len(totals)) if v not in forbidden]
                candidates += [(totals[v], i, v) for v in allowed if float(totals[v]) != float("-inf")]
            if not candidates and not pools[g]:
                raise ValueError(f"at step {step} the rules forbid every continuation of group {g}")
            candidates = sorted(candidates, key=lambda c: -float(c[0]))[:2 * k]
            beams[g] = _advance(group, pools[g], candidates, lp, step, alpha, k, model.eos_id)
            pools[g] = sorted(pools[g], key=lambda h: -float(h.score))[:k]
            for hyp in beams[g]:
                taken[hyp.tokens[-1]] += 1
    return pools
