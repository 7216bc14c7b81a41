"""Vectorised n-gram counting shared by BLEU and CIDEr.

Captions arrive as token sequences (lists of strings, or of integer token ids). They are
turned into one flat id array and every window of 1..n tokens gets an exact integer code.
Counting is then a handful of numpy sorts instead of one Python dict per caption, which is
what makes corpus evaluation and self-critical rewards fast.

Legend: S sentences, W windows (all n-grams of all sentences), G distinct n-grams,
I images, L the largest number of distinct n-grams of one image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

Sentence = Sequence  # a sequence of str tokens or of int token ids

_MAX_CODE = 1 << 62


@dataclass(frozen=True)
class EncodedSentences:
    """Sentences as one flat array of word ids.

    ids: (sum of lengths,) int64 word ids >= 1 (0 is never used, so codes of different
        n-gram orders cannot collide).
    lengths: (S,) int64 tokens per sentence.
    vocab_size: the largest id in use (V).
    words: id -> token for ids 1..V (``words[0]`` is a placeholder), kept so that n-grams
        can be looked up in a document-frequency table.
    """

    ids: np.ndarray
    lengths: np.ndarray
    vocab_size: int
    words: list


def encode_sentences(sentences: Sequence[Sentence]) -> EncodedSentences:
    """Map every token to a batch-local id (first come, first numbered)."""
    flat = [w for sent in sentences for w in sent]
    words = [None, *dict.fromkeys(flat)]  # distinct tokens in order of appearance
    index = {w: i for i, w in enumerate(words)}
    ids = np.fromiter(map(index.__getitem__, flat), dtype=np.int64, count=len(flat))
    lengths = np.fromiter(map(len, sentences), dtype=np.int64, count=len(sentences))
    return EncodedSentences(ids, lengths, len(words) - 1, words)


@dataclass(frozen=True)
class Windows:
    """Every n-gram occurrence (window) of every sentence.

    sentence: (W,) sentence index of the window.
    start: (W,) position of the window's first token in the flat id array.
    order: (W,) n of the window (1..n).
    gram: (W,) id of the distinct n-gram (0..G-1), ids sorted by (order, content).
    gram_start, gram_order: (G,) one occurrence of each distinct n-gram, to read its words.
    """

    sentence: np.ndarray
    start: np.ndarray
    order: np.ndarray
    gram: np.ndarray
    gram_start: np.ndarray
    gram_order: np.ndarray

    @property
    def num_grams(self) -> int:
        return len(self.gram_start)


def _rank(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ranks of ``codes`` (equal codes share a rank) and one index per rank."""
    if len(codes) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    perm = np.argsort(codes)
    sorted_codes = codes[perm]
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    np.not_equal(sorted_codes[1:], sorted_codes[:-1], out=new[1:])
    ranks_sorted = np.cumsum(new) - 1
    ranks = np.empty_like(ranks_sorted)
    ranks[perm] = ranks_sorted
    return ranks, perm[new]


def ngram_windows(enc: EncodedSentences, n: int = 4) -> Windows:
    """All 1..n-gram windows of the encoded sentences with exact n-gram ids."""
    num_tokens = len(enc.ids)
    sentence_of_token = np.repeat(np.arange(len(enc.lengths)), enc.lengths)
    offsets = np.cumsum(enc.lengths) - enc.lengths
    remaining = (offsets + enc.lengths)[sentence_of_token] - np.arange(num_tokens)  # tokens left incl. self
    base = enc.vocab_size + 1
    starts, orders, codes = [], [], []
    prefix = enc.ids  # code of the k-gram starting at each token (valid where remaining >= k)
    for k in range(1, n + 1):
        if k > 1:
            shifted = np.zeros(num_tokens, np.int64)
            shifted[: max(num_tokens - k + 1, 0)] = enc.ids[k - 1:]
            if (_max_code(prefix) + 1) * base >= _MAX_CODE:
                prefix, _ = _rank(prefix)  # keep codes small and exact: rank, then extend
                prefix = prefix + 1
            prefix = prefix * base + shifted
        valid = np.flatnonzero(remaining >= k)
        starts.append(valid)
        orders.append(np.full(len(valid), k, np.int8))
        codes.append(prefix[valid])
    start = np.concatenate(starts)
    order = np.concatenate(orders)
    # codes of different orders never collide while digits are >= 1, but after a re-ranking
    # they might, so the order is made part of the key explicitly.
    gram, first = _rank(_order_major(np.concatenate(codes), order, n))
    return Windows(sentence_of_token[start], start, order, gram, start[first], order[first])


def _max_code(codes: np.ndarray) -> int:
    return int(codes.max()) if len(codes) else 0


def _order_major(code: np.ndarray, order: np.ndarray, n: int) -> np.ndarray:
    """Keys sorting by (order, code) exactly; codes are re-ranked if they would overflow."""
    top = _max_code(code) + 1
    if top * (n + 1) < _MAX_CODE:
        return order.astype(np.int64) * top + code
    ranks, _ = _rank(code)
    return order.astype(np.int64) * (len(code) + 1) + ranks


@dataclass(frozen=True)
class ImageTable:
    """Dense per-image n-gram counts: each image numbers its own distinct n-grams 0..L-1.

    counts: (S, L) float64 occurrences of the sentence's image's local n-gram l.
    local_gram: (I, L) int64 global n-gram id of each local slot (-1 where unused).
    local_order: (I, L) int8 n of each local slot (0 where unused).
    token_slot: (T,) local slot of each token's unigram (T = all tokens of all sentences).
    """

    counts: np.ndarray
    local_gram: np.ndarray
    local_order: np.ndarray
    token_slot: np.ndarray

    def per_order(self, values: np.ndarray, image: np.ndarray, n: int) -> np.ndarray:
        """Sum ``values`` (..., L) over the slots of each order: (..., L) -> (..., n).

        ``image`` gives the image of each leading row of ``values``.
        """
        order = self.local_order[image]
        if values.ndim == 3:
            order = order[:, None, :]
        return np.stack([(values * (order == k)).sum(-1) for k in range(1, n + 1)], axis=-1)


def image_table(
    windows: Windows, sentence_image: np.ndarray, num_images: int, num_tokens: int
) -> ImageTable:
    """Gather the windows into one dense row of local n-gram counts per sentence."""
    num_sentences = len(sentence_image)
    grams = max(windows.num_grams, 1)
    key = sentence_image[windows.sentence] * grams + windows.gram
    pair, first = _rank(key)  # pair = distinct (image, n-gram), sorted by image then n-gram
    pair_key = key[first]
    pair_image = pair_key // grams
    pair_gram = pair_key % grams
    per_image = np.bincount(pair_image, minlength=num_images)
    first_pair = np.cumsum(per_image) - per_image
    local = np.arange(len(pair_key)) - first_pair[pair_image]
    width = max(int(per_image.max()) if num_images else 0, 1)
    flat = windows.sentence * width + local[pair]
    counts = np.bincount(flat, minlength=num_sentences * width).astype(np.float64)
    local_gram = np.full((num_images, width), -1, np.int64)
    local_gram[pair_image, local] = pair_gram
    local_order = np.zeros((num_images, width), np.int8)
    local_order[pair_image, local] = windows.gram_order[pair_gram]
    unigram = windows.order == 1
    token_slot = np.zeros(num_tokens, np.int64)
    token_slot[windows.start[unigram]] = local[pair[unigram]]
    return ImageTable(counts.reshape(num_sentences, width), local_gram, local_order, token_slot)


@dataclass(frozen=True)
class CaptionSet:
    """Candidates and references of a set of images, counted once for every metric.

    Sentences are laid out as all references (grouped by image, in image order), then all
    candidates. ``ref_start``/``ref_count`` (I,) locate each image's reference rows;
    ``cand_image`` (C,) gives the image of each candidate row (row ``R + c``).
    """

    enc: EncodedSentences
    windows: Windows
    table: ImageTable
    ref_start: np.ndarray
    ref_count: np.ndarray
    cand_image: np.ndarray
    n: int

    @property
    def num_refs(self) -> int:
        return int(self.ref_count.sum())

    @property
    def num_images(self) -> int:
        return len(self.ref_count)

    def max_ref_counts(self) -> np.ndarray:
        """(I, L) largest count of each local n-gram over the image's references."""
        return np.maximum.reduceat(self.table.counts[: self.num_refs], self.ref_start, axis=0)

    def document_frequency(self) -> np.ndarray:
        """(G,) number of images whose references contain each distinct n-gram."""
        in_refs = self.max_ref_counts() > 0
        return np.bincount(self.table.local_gram[in_refs], minlength=self.windows.num_grams)

    def sentence_image(self) -> np.ndarray:
        """(S,) image of every sentence row (references first, then candidates)."""
        return np.concatenate([np.repeat(np.arange(self.num_images), self.ref_count), self.cand_image])

    def cand_rows(self) -> np.ndarray:
        return self.num_refs + np.arange(len(self.cand_image))

    def lengths(self) -> np.ndarray:
        """(S,) tokens per sentence."""
        return self.enc.lengths

    def ref_index(self) -> np.ndarray:
        """(I, Rmax) reference rows of each image, -1 where an image has fewer references."""
        rmax = int(self.ref_count.max()) if self.num_images else 0
        slots = np.arange(rmax)
        rows = self.ref_start[:, None] + slots[None, :]
        return np.where(slots[None, :] < self.ref_count[:, None], rows, -1)

    def gram_words(self) -> np.ndarray:
        """(G, n) batch word ids of every distinct n-gram, 0-padded on the right."""
        w = self.windows
        out = np.zeros((w.num_grams, self.n), np.int64)
        for k in range(self.n):
            has = w.gram_order > k
            out[has, k] = self.enc.ids[w.gram_start[has] + k]
        return out


def count_caption_set(
    candidates: Sequence[Sentence],
    references: Sequence[Sequence[Sentence]],
    cand_image: np.ndarray | None = None,
    n: int = 4,
) -> CaptionSet:
    """Count the n-grams of candidates and their images' references.

    candidates: C token sequences; references: I lists of token sequences (each >= 1);
    cand_image: (C,) image of each candidate, default ``arange(C)`` (one per image).
    """
    if cand_image is None:
        cand_image = np.arange(len(candidates))
    cand_image = np.asarray(cand_image, dtype=np.int64)
    ref_count = np.fromiter((len(r) for r in references), dtype=np.int64, count=len(references))
    ref_start = np.cumsum(ref_count) - ref_count
    sentences = [s for refs in references for s in refs]
    sentences.extend(candidates)
    sentence_image = np.concatenate([np.repeat(np.arange(len(references)), ref_count), cand_image])
    enc = encode_sentences(sentences)
    windows = ngram_windows(enc, n)
    table = image_table(windows, sentence_image, len(references), len(enc.ids))
    return CaptionSet(enc, windows, table, ref_start, ref_count, cand_image, n)
