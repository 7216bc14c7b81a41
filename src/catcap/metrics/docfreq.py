"""Document frequencies of reference n-grams, built once and saved without pickle.

Self-critical training scores every sampled caption with CIDEr-D against document
frequencies of the whole training set. :class:`DocumentFrequency` holds them: built once
from the training references, saved as a plain ``.npz`` (loaded with
``allow_pickle=False``), and looked up for a whole batch of n-grams with a few
``searchsorted`` calls.

Storage: ``words`` (V,) the corpus tokens (str or int), word id = index + 1; for each order
k = 1..n, ``grams_k`` (M_k, k) word ids sorted lexicographically and ``df_k`` (M_k,) the
number of images whose references contain that n-gram; ``num_docs`` = |D|.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from catcap.atomic import atomic_write
from catcap.metrics.errors import MetricInputError
from catcap.metrics.ngrams import Sentence, count_caption_set

FORMAT = "catcap-docfreq-v1"


@dataclass
class DocumentFrequency:
    """df and |D| of a reference corpus (see the module docstring for the layout)."""

    words: list
    grams: list[np.ndarray]
    df: list[np.ndarray]
    num_docs: int
    _index: dict = field(init=False, repr=False)
    _keys: list[np.ndarray] = field(init=False, repr=False)

    def __post_init__(self):
        self._index = {w: i + 1 for i, w in enumerate(self.words)}
        self._keys = _level_keys(self.grams, len(self.words))
        for k, keys in enumerate(self._keys, start=1):
            if len(keys) > 1 and not np.all(keys[1:] > keys[:-1]):
                raise MetricInputError(f"document frequencies: the {k}-grams are not sorted; the file is corrupt, rebuild it")

    @property
    def n(self) -> int:
        return len(self.grams)

    @property
    def log_docs(self) -> float:
        return float(np.log(float(self.num_docs)))

    @classmethod
    def from_references(cls, references: Sequence[Sequence[Sentence]], n: int = 4) -> "DocumentFrequency":
        """Count, for every n-gram, the images (documents) whose references contain it."""
        if not references:
            raise MetricInputError("document frequencies need at least one image with references; got none")
        cs = count_caption_set([], references, np.zeros(0, np.int64), n)
        df = cs.document_frequency()
        words = cs.gram_words()
        order = cs.windows.gram_order
        grams = [words[order == k, :k].astype(np.int32) for k in range(1, n + 1)]
        dfs = [df[order == k].astype(np.int64) for k in range(1, n + 1)]
        return cls(list(cs.enc.words[1:]), grams, dfs, len(references))

    def lookup(self, words: Sequence, gram_words: np.ndarray, gram_order: np.ndarray) -> np.ndarray:
        """(G,) df of n-grams given as (G, n) ids into ``words`` (0-padded) and their orders.

        ``words[i]`` is the token of batch id i (``words[0]`` is an unused placeholder).
        """
        to_df = np.fromiter((self._index.get(w, 0) for w in words), dtype=np.int64, count=len(words))
        ids = to_df[gram_words]
        out = np.zeros(len(gram_words), np.float64)
        idx = ids[:, 0] - 1  # level-1 rows are the words themselves, in id order
        idx[ids[:, 0] == 0] = -1
        base = len(self.words) + 1
        for k in range(1, min(self.n, gram_words.shape[1]) + 1):
            if k > 1:
                idx = _find(self._keys[k - 1], np.where(idx >= 0, idx * base + ids[:, k - 1], -1), ids[:, k - 1] > 0)
            here = (gram_order == k) & (idx >= 0)
            out[here] = self.df[k - 1][idx[here]]
        return out

    def check_tokens(self, example) -> None:
        """Raise a clear error when candidates use str tokens and the table int ids (or back)."""
        if not self.words:
            return
        want, got = _kind(self.words[0]), _kind(example)
        if want != got:
            raise MetricInputError(
                f"document frequencies were built from {want} tokens but the captions to score "
                f"use {got} tokens; build them from references of the same kind "
                f"(token ids with token ids, words with words)"
            )

    def save(self, path: str | os.PathLike) -> None:
        """Write a ``.npz`` atomically (temp file in the same folder, then rename)."""
        path = Path(path)
        arrays = {"format": np.array(FORMAT), "num_docs": np.array(self.num_docs), "words": _words_array(self.words)}
        for k, (g, d) in enumerate(zip(self.grams, self.df), start=1):
            arrays[f"grams_{k}"], arrays[f"df_{k}"] = g, d
        write_npz_atomic(path, arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DocumentFrequency":
        """Read a file written by :meth:`save` (no pickle is ever loaded)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt = str(z["format"]) if "format" in z else "<none>"
                if fmt != FORMAT:
                    raise MetricInputError(f"{path}: expected a {FORMAT} file, found format {fmt}; rebuild it with DocumentFrequency.save")
                n = sum(1 for key in z.files if key.startswith("grams_"))
                words = z["words"].tolist()
                grams = [z[f"grams_{k}"] for k in range(1, n + 1)]
                dfs = [z[f"df_{k}"] for k in range(1, n + 1)]
                return cls(words, grams, dfs, int(z["num_docs"]))
        except (OSError, ValueError, KeyError) as err:
            if isinstance(err, MetricInputError):
                raise
            raise MetricInputError(f"{path}: not a readable document-frequency file ({err}); expected a .npz written by DocumentFrequency.save") from err


def write_npz_atomic(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez_compressed`` to ``path`` atomically (:mod:`catcap.atomic`): a killed process
    leaves the old file or the new one, never half of one."""
    with atomic_write(path, "wb") as f:
        np.savez_compressed(f, **arrays)


def _kind(token) -> str:
    return "str" if isinstance(token, str) else "int"


def _words_array(words: list) -> np.ndarray:
    if words and isinstance(words[0], str):
        return np.array(words, dtype=str)
    return np.array(words, dtype=np.int64)


def _level_keys(grams: list[np.ndarray], vocab: int) -> list[np.ndarray]:
    """Sorted search keys per order: key = row of the (k-1)-prefix * (V+1) + last word."""
    base = vocab + 1
    keys = [grams[0][:, 0].astype(np.int64)] if grams else []
    for k in range(2, len(grams) + 1):
        rows = grams[k - 1].astype(np.int64)
        parent = rows[:, 0] - 1
        for j in range(1, k - 1):
            parent = _find(keys[j], parent * base + rows[:, j], np.ones(len(rows), bool))
        keys.append(parent * base + rows[:, k - 1])
    return keys


def _find(sorted_keys: np.ndarray, query: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Position of each query key in ``sorted_keys``, -1 when absent or not ``ok``."""
    pos = np.searchsorted(sorted_keys, query)
    pos = np.minimum(pos, len(sorted_keys) - 1) if len(sorted_keys) else pos
    hit = ok & (query >= 0) & (len(sorted_keys) > 0)
    if len(sorted_keys):
        hit &= sorted_keys[pos] == query
    return np.where(hit, pos, -1)
