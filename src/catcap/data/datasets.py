"""PyTorch datasets over Karpathy records and a feature store.

* :class:`CaptionDataset` (cross-entropy training): one row per (image, caption); an item is a
  :class:`CaptionItem` with the image's regions (N, F) float32, boxes (N, 4) or None, and the
  caption ids ``<bos> w1..wk <eos>`` (k <= ``max_len``).
* :class:`ImageDataset` (evaluation, self-critical training): one row per image; an item is an
  :class:`ImageItem` with every reference caption (tokens and raw text).

Batch them with :func:`catcap.data.collate.collate_captions` / ``collate_images``.
Call :func:`validate_dataset` before a long run: it finds bad input in seconds instead of
crashing the run halfway.

Worker processes: an HDF5 handle cannot be shared across ``fork`` or pickled, so each process
reopens the store by its path on first use (:class:`_ProcessLocalStore`); ``DataLoader`` with
``num_workers > 0`` works with either start method.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils.data import Dataset

from catcap.data.features import FeatureStore, check_features
from catcap.data.karpathy import ImageRecord
from catcap.data.vocab import Vocab

__all__ = ["CaptionDataset", "CaptionItem", "DatasetError", "ImageDataset", "ImageItem", "validate_dataset"]


class DatasetError(ValueError):
    """Records that cannot make a dataset (empty split, image without captions, ...)."""


@dataclass
class CaptionItem:
    """One (image, caption) pair: regions (N, F) float32, boxes (N, 4) or None, caption (T,) long."""

    key: str
    image_id: Any
    regions: torch.Tensor
    boxes: torch.Tensor | None
    caption: torch.Tensor


@dataclass
class ImageItem:
    """One image with all its references; ``reference_ids`` only when the dataset has a vocab."""

    key: str
    image_id: Any
    regions: torch.Tensor
    boxes: torch.Tensor | None
    references: list[list[str]]
    raw_references: list[str]
    reference_ids: list[list[int]] | None = None


class _ProcessLocalStore:
    """A feature store that reopens itself (``type(store)(store.path)``) in every other process.

    Stores without a ``path`` (e.g. in-memory test stores) are used as they are.
    """

    def __init__(self, store: FeatureStore):
        self._store: FeatureStore | None = store
        self._pid = os.getpid()
        self._kind = type(store)
        self._path = getattr(store, "path", None)

    @property
    def store(self) -> FeatureStore:
        if self._path is not None and (self._store is None or self._pid != os.getpid()):
            self._store, self._pid = self._kind(self._path), os.getpid()
        return self._store

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self._path is not None:
            state["_store"] = None  # reopened by path on first use in the new process
        return state


class _FeatureDataset(Dataset):
    def __init__(self, records: Sequence[ImageRecord], store: FeatureStore, what: str):
        if len(records) == 0:
            raise DatasetError(f"{what}: expected at least one image record, found none; "
                               f"check the split name and the Karpathy file (load_karpathy lists its splits)")
        self.records = list(records)
        self._store = _ProcessLocalStore(store)

    @property
    def store(self) -> FeatureStore:
        return self._store.store

    def _features(self, rec: ImageRecord) -> tuple[torch.Tensor, torch.Tensor | None]:
        """regions (N, F) float32 and boxes (N, 4) float32 or None of one image."""
        feats = self.store.get(rec.key)
        regions = torch.from_numpy(feats.regions).float()
        boxes = None if feats.boxes is None else torch.from_numpy(feats.boxes).float()
        return regions, boxes


class CaptionDataset(_FeatureDataset):
    """One row per (image, caption) for cross-entropy training.

    Captions are encoded with ``vocab.encode(tokens, max_len)``: at most ``max_len`` words
    (16 in the standard preprocessing), then ``<eos>``. Images without captions give no rows
    (:func:`validate_dataset` reports them).
    """

    def __init__(self, records: Sequence[ImageRecord], store: FeatureStore, vocab: Vocab, max_len: int | None = 16):
        super().__init__(records, store, "CaptionDataset")
        self.vocab, self.max_len = vocab, max_len
        self.rows: list[tuple[int, int]] = [(i, j) for i, rec in enumerate(self.records) for j in range(len(rec.captions))]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> CaptionItem:
        i, j = self.rows[index]
        rec = self.records[i]
        regions, boxes = self._features(rec)
        ids = self.vocab.encode(rec.captions[j], max_len=self.max_len)
        return CaptionItem(rec.key, rec.image_id, regions, boxes, torch.tensor(ids, dtype=torch.long))


class ImageDataset(_FeatureDataset):
    """One row per image, with all its reference captions (evaluation and self-critical training).

    With a ``vocab``, ``reference_ids`` holds each reference's word ids (no ``<bos>``/``<eos>``,
    not truncated).
    """

    def __init__(self, records: Sequence[ImageRecord], store: FeatureStore, vocab: Vocab | None = None):
        super().__init__(records, store, "ImageDataset")
        self.vocab = vocab

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> ImageItem:
        rec = self.records[index]
        regions, boxes = self._features(rec)
        ids = None
        if self.vocab is not None:
            ids = [self.vocab.encode(c, add_bos=False, add_eos=False) for c in rec.captions]
        return ImageItem(rec.key, rec.image_id, regions, boxes,
                         [list(c) for c in rec.captions], list(rec.raw), ids)


def validate_dataset(records: Sequence[ImageRecord], store: FeatureStore, feature_dim: int | None = None,
                     what: str = "dataset") -> None:
    """Up-front checks before a long run; raises DatasetError / FeatureStoreError saying what to fix.

    Checks: at least one record; every image has at least one caption, and every caption at
    least one word; every image has features in ``store``; the store's width is
    ``feature_dim`` (when given). Feature values are checked per image by ``store.get``.
    """
    if len(records) == 0:
        raise DatasetError(f"{what}: expected at least one image record, found none (an empty split?); "
                           f"check the split name against the splits of the Karpathy file")
    no_caps = [r.key for r in records if not r.captions]
    if no_caps:
        raise DatasetError(f"{what}: expected at least one caption per image, found {len(no_caps)} image(s) "
                           f"without captions (first: {no_caps[:5]}); drop them from the split or add captions")
    empty = [(r.key, j, r.raw[j] if j < len(r.raw) else "") for r in records for j, c in enumerate(r.captions) if not c]
    if empty:
        key, j, raw = empty[0]
        raise DatasetError(f"{what}: expected every caption to have at least one word, found {len(empty)} empty "
                           f"caption(s) (first: image {key!r}, caption {j}, raw {raw!r}); fix or remove them")
    dup = len({r.key for r in records}) != len(records)
    if dup:
        raise DatasetError(f"{what}: expected each image once, found repeated image ids; "
                           f"deduplicate the records (image ids key the feature store)")
    check_features(store, [r.key for r in records], feature_dim)
