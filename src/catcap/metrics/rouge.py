"""ROUGE-L exactly as pycocoevalcap 1.2 computes it.

Per image: the longest common subsequence (LCS) of the candidate with each reference gives
precision ``lcs/len(c)`` and recall ``lcs/len(r)``; the maxima over references are combined
as ``(1 + beta^2) P R / (R + beta^2 P)`` with beta = 1.2. The corpus score is the mean.
Like the toolkit (which splits on a single space), an empty sentence counts as one empty
token. LCS lengths come from a bit-parallel algorithm (Hyyro 2004) run on all
(candidate, reference) pairs at once.
"""

from __future__ import annotations

import numpy as np

from catcap.metrics.ngrams import CaptionSet

BETA = 1.2
WORD_BITS = 64


def _cand_masks(cs: CaptionSet) -> np.ndarray:
    """(C, L) bit masks: bit i of [c, slot] is set when token i of candidate c is that unigram."""
    lengths = cs.lengths()
    rows = cs.cand_rows()
    starts = (np.cumsum(lengths) - lengths)[rows]
    masks = np.zeros((len(rows), cs.table.counts.shape[1]), np.uint64)
    cand = np.repeat(np.arange(len(rows)), lengths[rows])
    pos = np.arange(len(cand)) - np.repeat(np.cumsum(lengths[rows]) - lengths[rows], lengths[rows])
    token = np.repeat(starts, lengths[rows]) + pos
    keep = pos < WORD_BITS
    np.bitwise_or.at(masks, (cand[keep], cs.table.token_slot[token[keep]]), np.left_shift(np.uint64(1), pos[keep].astype(np.uint64)))
    return masks


def lcs_lengths(cs: CaptionSet) -> np.ndarray:
    """(C, Rmax) LCS length of each candidate with each of its image's references (0 = pad)."""
    lengths = cs.lengths()
    offsets = np.cumsum(lengths) - lengths
    ref_index = cs.ref_index()[cs.cand_image]  # (C, Rmax)
    cand_idx, slot = np.nonzero(ref_index >= 0)
    ref = ref_index[cand_idx, slot]
    masks = _cand_masks(cs)
    ref_len = lengths[ref]
    v = np.full(len(ref), np.uint64(2**64 - 1))
    for j in range(int(ref_len.max(initial=0))):
        active = ref_len > j
        tok = offsets[ref] + np.minimum(j, np.maximum(ref_len - 1, 0))
        u = v & np.where(active, masks[cand_idx, cs.table.token_slot[tok]], np.uint64(0))
        v = (v + u) | (v - u)
    cand_len = lengths[cs.cand_rows()][cand_idx]
    width = np.minimum(cand_len, WORD_BITS).astype(np.uint64)
    low = np.where(width == WORD_BITS, np.uint64(2**64 - 1), (np.uint64(1) << width) - np.uint64(1))
    lcs = width.astype(np.int64) - np.bitwise_count(v & low).astype(np.int64)
    long_pairs = np.flatnonzero(cand_len > WORD_BITS)
    out = np.zeros(ref_index.shape, np.int64)
    out[cand_idx, slot] = lcs
    for p in long_pairs:  # candidates longer than one machine word: exact Python fallback
        out[cand_idx[p], slot[p]] = _lcs_python(_tokens(cs, cs.cand_rows()[cand_idx[p]]), _tokens(cs, ref[p]))
    return out


def _tokens(cs: CaptionSet, row: int) -> list:
    start = int(np.sum(cs.lengths()[:row]))
    return cs.enc.ids[start:start + int(cs.lengths()[row])].tolist()


def _lcs_python(a: list, b: list) -> int:
    """Bit-parallel LCS on Python integers (any length)."""
    masks: dict = {}
    for i, w in enumerate(a):
        masks[w] = masks.get(w, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for w in b:
        u = v & masks.get(w, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def rouge_l(cs: CaptionSet, beta: float = BETA) -> tuple[float, np.ndarray]:
    """Corpus ROUGE-L (mean) and per-candidate scores."""
    lengths = cs.lengths()
    ref_index = cs.ref_index()[cs.cand_image]
    valid = ref_index >= 0
    ref_len = lengths[np.maximum(ref_index, 0)]
    cand_len = lengths[cs.cand_rows()][:, None]
    lcs = lcs_lengths(cs) + ((cand_len == 0) & (ref_len == 0))  # "" == "" as one token
    prec = np.where(valid, lcs / np.maximum(cand_len, 1), 0.0).max(axis=1)
    rec = np.where(valid, lcs / np.maximum(ref_len, 1), 0.0).max(axis=1)
    ok = (prec != 0) & (rec != 0)
    denom = np.where(ok, rec + beta**2 * prec, 1.0)
    scores = np.where(ok, ((1 + beta**2) * prec * rec) / denom, 0.0)
    return float(scores.mean()) if len(scores) else 0.0, scores
