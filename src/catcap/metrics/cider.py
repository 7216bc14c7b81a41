"""CIDEr-D (the toolkit's "CIDEr") and the original CIDEr, per image and corpus.

For each n = 1..4, every sentence becomes a tf-idf vector ``g^n`` with
``g_k = tf_k * (log(|D|) - log(max(1, df_k)))``, where df counts the images of D whose
references contain the n-gram. CIDEr-D (Vedantam et al., as pycocoevalcap 1.2 computes it):

    CIDEr-D_n(c, S) = 10/m * sum_j exp(-(l(c) - l(s_j))^2 / (2 sigma^2))
                      * <min(g^n(c), g^n(s_j)), g^n(s_j)> / (|g^n(c)| |g^n(s_j)|)

averaged over n, with sigma = 6 and ``l`` the toolkit's length, which is the number of
*bigrams* (``max(len - 1, 0)``), not of words. Plain CIDEr drops the clipping and the
length penalty: ``10/m * sum_j <g^n(c), g^n(s_j)> / (|g^n(c)| |g^n(s_j)|)``.

By default df and |D| come from the references being evaluated (the toolkit's behaviour);
a :class:`~catcap.metrics.docfreq.DocumentFrequency` built from training references gives
the self-critical reward instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catcap.metrics.ngrams import CaptionSet, count_caption_set

CHUNK = 512  # candidates scored at once; bounds the (chunk, Rmax, L) temporaries


@dataclass(frozen=True)
class Idf:
    """Inverse document frequencies of one caption set's n-grams.

    log_docs: log(|D|); df: (G,) document frequency of every distinct n-gram of the set.
    """

    log_docs: float
    df: np.ndarray


def idf_from_references(cs: CaptionSet) -> Idf:
    """df of every n-gram = number of images whose references contain it."""
    return Idf(float(np.log(float(cs.num_images))), cs.document_frequency().astype(np.float64))


def tfidf(cs: CaptionSet, idf: Idf) -> np.ndarray:
    """(S, L) tf-idf weight of each sentence's local n-grams."""
    slot_idf = idf.log_docs - np.log(np.maximum(1.0, idf.df[np.maximum(cs.table.local_gram, 0)]))
    return cs.table.counts * slot_idf[cs.sentence_image()]


def cider_scores(cs: CaptionSet, idf: Idf | None = None, sigma: float = 6.0, clipped: bool = True) -> np.ndarray:
    """(C,) CIDEr-D (``clipped=True``, length penalty ``sigma``) or plain CIDEr per candidate.

    ``sigma=None`` disables the length penalty.
    """
    idf = idf_from_references(cs) if idf is None else idf
    weights = tfidf(cs, idf)
    norms = np.sqrt(cs.table.per_order(weights * weights, cs.sentence_image(), cs.n))  # (S, n)
    bigrams = np.maximum(cs.lengths() - 1, 0).astype(np.float64)
    ref_index = cs.ref_index()
    scores = np.empty(len(cs.cand_image))
    cand_rows = cs.cand_rows()
    for lo in range(0, len(cand_rows), CHUNK):
        rows = cand_rows[lo:lo + CHUNK]
        image = cs.cand_image[lo:lo + CHUNK]
        refs = ref_index[image]  # (c, Rmax), -1 = none
        valid = refs >= 0
        refs = np.maximum(refs, 0)
        cand_w = weights[rows][:, None, :]
        ref_w = weights[refs]
        overlap = np.minimum(cand_w, ref_w) if clipped else cand_w
        dot = cs.table.per_order(overlap * ref_w, image, cs.n)  # (c, Rmax, n)
        denom = norms[rows][:, None, :] * norms[refs]
        sim = np.where(denom != 0, dot / np.where(denom != 0, denom, 1.0), dot)
        if sigma is not None:
            delta = bigrams[rows][:, None] - bigrams[refs]
            sim = sim * np.exp(-(delta**2) / (2 * sigma**2))[..., None]
        per_ref = sim.mean(-1) * valid
        scores[lo:lo + CHUNK] = per_ref.sum(-1) / cs.ref_count[image] * 10.0
    return scores


def cider_d(cs: CaptionSet, idf: Idf | None = None, sigma: float = 6.0) -> tuple[float, np.ndarray]:
    """Corpus CIDEr-D (mean over candidates) and per-candidate scores."""
    scores = cider_scores(cs, idf, sigma=sigma, clipped=True)
    return float(scores.mean()) if len(scores) else 0.0, scores


def cider(cs: CaptionSet, idf: Idf | None = None) -> tuple[float, np.ndarray]:
    """Original CIDEr (no clipping, no length penalty), corpus mean and per candidate."""
    scores = cider_scores(cs, idf, sigma=None, clipped=False)
    return float(scores.mean()) if len(scores) else 0.0, scores


class CiderD:
    """CIDEr-D reward with fixed document frequencies (self-critical training).

    ``CiderD(DocumentFrequency.load("train_df.npz"))(candidates, references, cand_image)``
    returns one score per candidate: candidates are C token sequences (words or token ids,
    already cut at ``<eos>``), references I lists of sequences of the same kind,
    ``cand_image`` (C,) the image of each candidate (default: one candidate per image).
    Scores are identical to the toolkit's CIDEr-D formula with df and |D| taken from the
    table instead of from ``references``.
    """

    def __init__(self, df, sigma: float = 6.0):
        self.df = df
        self.sigma = sigma

    def idf(self, cs: CaptionSet) -> Idf:
        """df of the caption set's n-grams looked up in the table."""
        values = self.df.lookup(cs.enc.words, cs.gram_words(), cs.windows.gram_order)
        return Idf(self.df.log_docs, values)

    def __call__(self, candidates, references, cand_image=None) -> np.ndarray:
        first = next((tok for sent in candidates for tok in sent), None)
        if first is not None:
            self.df.check_tokens(first)
        cs = count_caption_set(candidates, references, cand_image, self.df.n)
        return cider_scores(cs, self.idf(cs), sigma=self.sigma, clipped=True)
