"""BLEU-1..4 exactly as pycocoevalcap 1.2 computes it.

Corpus BLEU sums clipped n-gram matches, candidate n-gram counts and lengths over all
images; the reference length of each image is the one closest to the candidate's length
(ties go to the shorter reference); ``tiny=1e-15`` and ``small=1e-9`` keep empty counts
finite; the brevity penalty ``exp(1 - r/c)`` applies only when ``c/r < 1``. Per-image
scores use the same formula on one image's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catcap.metrics.ngrams import CaptionSet

TINY = 1e-15
SMALL = 1e-9


@dataclass(frozen=True)
class BleuResult:
    """corpus: [BLEU-1..n]; per_image: (C, n); stats: (C, 2 + 2n) sufficient statistics
    ``[testlen, reflen, correct_1..n, guess_1..n]`` (summed rows give the corpus score)."""

    corpus: list[float]
    per_image: np.ndarray
    stats: np.ndarray


def bleu_from_stats(stats: np.ndarray, n: int = 4) -> np.ndarray:
    """BLEU-1..n from (..., 2 + 2n) statistics (summed over images for a corpus score)."""
    stats = np.asarray(stats, dtype=np.float64)
    testlen, reflen = stats[..., 0], stats[..., 1]
    correct, guess = stats[..., 2:2 + n], stats[..., 2 + n:2 + 2 * n]
    precision = np.cumprod((correct + TINY) / (guess + SMALL), axis=-1)
    scores = precision ** (1.0 / np.arange(1, n + 1))
    ratio = (testlen + TINY) / (reflen + SMALL)
    with np.errstate(divide="ignore", over="ignore"):
        penalty = np.where(ratio < 1, np.exp(1 - 1 / ratio), 1.0)
    return scores * penalty[..., None]


def closest_ref_length(cand_len: np.ndarray, ref_len: np.ndarray) -> np.ndarray:
    """(C,), (C, Rmax) with -1 padding -> (C,) reference length closest to each candidate,
    ties to the shorter one (the toolkit's ``min((abs(l - c), l))``)."""
    top = int(max(ref_len.max(initial=0), cand_len.max(initial=0))) + 1
    distance = np.where(ref_len >= 0, np.abs(ref_len - cand_len[:, None]), top)
    key = distance * top + np.maximum(ref_len, 0)
    best = np.argmin(key, axis=1)
    return ref_len[np.arange(len(cand_len)), best]


def bleu_stats(cs: CaptionSet) -> np.ndarray:
    """(C, 2 + 2n) BLEU statistics of every candidate against its image's references."""
    n, table = cs.n, cs.table
    counts = table.counts
    max_ref = cs.max_ref_counts()
    image = cs.cand_image
    clipped = np.minimum(counts[cs.cand_rows()], max_ref[image])
    correct = table.per_order(clipped, image, n)
    cand_len = cs.lengths()[cs.cand_rows()]
    guess = np.maximum(cand_len[:, None] - np.arange(n)[None, :], 0)
    ref_index = cs.ref_index()[image]
    ref_len = np.where(ref_index >= 0, cs.lengths()[np.maximum(ref_index, 0)], -1)
    reflen = closest_ref_length(cand_len, ref_len)
    return np.column_stack([cand_len, reflen, correct, guess]).astype(np.float64)


def bleu(cs: CaptionSet) -> BleuResult:
    """Corpus and per-image BLEU-1..n of a counted caption set."""
    stats = bleu_stats(cs)
    corpus = bleu_from_stats(stats.sum(axis=0), cs.n)
    return BleuResult([float(x) for x in corpus], bleu_from_stats(stats, cs.n), stats)
