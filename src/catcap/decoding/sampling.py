"""Sampling n captions per image (temperature, top-k, nucleus/top-p), e.g. for SCST.

The n samples of an image share its memory: the decoder state is built with ``group = n``
(row ``b * n + i`` = sample ``i`` of image ``b``), nothing is copied per sample.

Which distribution the returned log-probabilities are under: the tokens are *drawn* from the
modified distribution (logits / temperature, logit processors, top-k, top-p, renormalised),
but ``token_log_probs`` and ``log_probs`` are the **unmodified** model log-probabilities,
``log_softmax(raw logits)`` at the sampled tokens, i.e. exactly what a teacher-forced forward
of the same model on the sampled captions gives (what self-critical training optimises).
Sampling runs under the caller's grad mode, so these log-probs can be back-propagated.
Legend: B images, n samples per image, R = B * n, V vocab, T steps.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from catcap.decoding.greedy import decode_rows
from catcap.decoding.processors import NEG_INF, DecodeOutput, Processor


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


def _picker(top_k: int, top_p: float, generator: torch.Generator | None):
    def pick(scores: Tensor) -> Tensor:
        scores = top_p_filter(top_k_filter(scores, top_k), top_p)
        return draw(scores.softmax(dim=1), generator)
    return pick


def sample(model, features: Tensor, feature_mask: Tensor, num_samples: int = 1, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, max_len: int = 16, processors: Iterable[Processor] = (),
           generator: torch.Generator | None = None) -> DecodeOutput:
    """features (B, N, F), mask (B, N) -> ``num_samples`` captions per image, rows image-major:
    tokens (B*n, T), token_log_probs (B*n, T) under the unmodified model distribution, their sum
    log_probs (B*n,), mask (B*n, T) True = generated (words and ``<eos>``), lengths (B*n,)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")
    pick = _picker(top_k, top_p, generator)
    return decode_rows(model, features, feature_mask, num_samples, max_len, processors, pick, temperature)
