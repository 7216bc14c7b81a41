"""The SCST reward: CIDEr-D with document frequencies of the training references.

The document frequencies are built once from the training split's tokenised references and
cached next to the dataset file as ``<dataset stem>.<split>.<fingerprint>.cider-df.npz`` (a
plain ``.npz``, never a pickle); the fingerprint is a hash of those references, so a changed
dataset gets a new table instead of a stale one. When the dataset's folder is not writable the
cache goes to the run's output folder. Candidates and references are word lists (the PTB
tokens evaluation uses), so the reward is the evaluation's CIDEr-D formula by construction.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from catcap.data.prepare import df_cache_name
from catcap.metrics.cider import CiderD
from catcap.metrics.docfreq import DocumentFrequency


def cached_document_frequency(references, dataset: str | Path, split: str, fallback_dir: str | Path,
                              log=print) -> tuple[DocumentFrequency, Path]:
    """The df table of ``references`` (the ``split`` of ``dataset``), loaded from its cache file
    or built and saved there once. -> (table, path of the cache file)."""
    dataset = Path(dataset)
    name = df_cache_name(dataset, split, references)
    for folder in (dataset.parent, Path(fallback_dir)):
        path = folder / name
        if path.exists():
            return DocumentFrequency.load(path), path
    df = DocumentFrequency.from_references([[list(c) for c in image] for image in references])
    for folder in (dataset.parent, Path(fallback_dir)):
        if os.access(folder, os.W_OK) or not folder.exists():
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            df.save(path)
            log(f"[catcap] CIDEr-D document frequencies of {len(references)} {split} images saved to {path}")
            return df, path
    raise PermissionError(f"cannot write the document-frequency cache {name} to {dataset.parent} or {fallback_dir}")


class CiderReward:
    """``reward(candidates, references, cand_image) -> (C,)`` CIDEr-D with a fixed df table."""

    def __init__(self, df: DocumentFrequency):
        self.scorer = CiderD(df)

    def __call__(self, candidates: Sequence[Sequence[str]], references: Sequence[Sequence[Sequence[str]]],
                 cand_image) -> np.ndarray:
        return self.scorer([list(c) for c in candidates], [[list(r) for r in refs] for refs in references],
                           np.asarray(cand_image))
