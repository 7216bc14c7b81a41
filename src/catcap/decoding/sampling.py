"""Sampling n captions per image (temperature, top-k, nucleus/top-p), e.g. for SCST: the
token choice of :class:`~catcap.decoding.greedy.RowSearch` when ``do_sample`` is set.

The n samples of an image share its memory: the decoder state is built with ``group = n``
(row ``b * n + i`` = sample ``i`` of image ``b``), nothing is copied per sample.

Which distribution the returned log-probabilities are under: the tokens are *drawn* from the
modified distribution (logits / temperature, logit processors, top-k, top-p, renormalised),
but ``token_log_probs`` and ``log_probs`` are the **unmodified** model log-probabilities,
``log_softmax(raw logits)`` at the sampled tokens, i.e. exactly what a teacher-forced forward
of the same model on the sampled captions gives (what self-critical training optimises).
Generation runs under the caller's grad mode, so these log-probs can be back-propagated.
Legend: B images, n samples per image, R = B * n, V vocab, T steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from catcap.decoding.processors import NEG_INF


def top_k_filter(scores: Tensor, k: int) -> Tensor:
    """Keep the ``k`` best entries of every row of (R, V) scores (0 = keep all)."""
    if k <= 0 or k >= scores.shape[1]:
        return scores
    kth = scores.topk(k, dim=1).values[:, -1:]
    return scores.masked_fill(scores < kth, NEG_INF)


def top_p_filter(scores: Tensor, p: float) -> Tensor:
    """Nucleus filtering of (R, V) log-probs: keep the smallest set of best tokens whose
    probability mass reaches ``p`` (the best token is always kept; 1.0 = keep all)."""
    if p >= 1.0:
        return scores
    sorted_scores, order = scores.sort(dim=1, descending=True)
    probs = sorted_scores.softmax(dim=1)
    mass_before = probs.cumsum(dim=1) - probs
    drop = torch.zeros_like(scores, dtype=torch.bool).scatter(1, order, mass_before >= p)
    return scores.masked_fill(drop, NEG_INF)


def draw(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One token per row of (R, V) probabilities by inverse-CDF sampling: a single uniform
    number per row and a binary search in the row's cumulative sum. Exact like
    ``torch.multinomial`` (which draws V exponential numbers per row, ~10x slower for a
    10,000-word vocabulary); tokens of probability 0 are never drawn."""
    cdf = probs.cumsum(dim=1)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=probs.device, dtype=cdf.dtype)
    index = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)  # first i with cdf_i > u * total
    return index[:, 0].clamp_(max=probs.shape[1] - 1)


def sampler(top_k: int, top_p: float, generator: torch.Generator | None):
    """Sampling's pick for :class:`~catcap.decoding.greedy.RowSearch`: (R, V) processed scores
    (already divided by the temperature) -> one drawn token per row, from the ``top_k`` best
    tokens (0 = all) and the nucleus of mass ``top_p`` (1 = all), renormalised."""
    def pick(scores: Tensor) -> Tensor:
        scores = top_p_filter(top_k_filter(scores, top_k), top_p)
        return draw(scores.softmax(dim=1), generator)
    return pick
