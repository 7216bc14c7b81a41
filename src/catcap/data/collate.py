"""Padded batches with explicit masks.

Legend: B batch, N regions (the most of any image in the batch), F feature width, T tokens
(the longest caption in the batch, ``<bos>`` and ``<eos>`` included). Masks are boolean and
``True`` means "real" (may be attended to); padding is zeros (features, boxes) or ``<pad>``
(= 0, captions).

Use as ``DataLoader(CaptionDataset(...), collate_fn=collate_captions)`` or
``DataLoader(ImageDataset(...), collate_fn=collate_images)``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import torch

from catcap.data.datasets import CaptionItem, ImageItem
from catcap.data.vocab import Vocab

__all__ = ["CaptionBatch", "ImageBatch", "collate_captions", "collate_images", "pad_captions", "pad_regions"]


class _Movable:
    """``to(device)`` and ``pin_memory()`` for a dataclass of tensors and plain lists."""

    def to(self, device: torch.device | str, non_blocking: bool = False):
        """A copy with every tensor on ``device`` (lists of ids/references stay as they are)."""
        return replace(self, **{f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                                for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)})

    def pin_memory(self):
        """Called by ``DataLoader(pin_memory=True)``."""
        return replace(self, **{f.name: getattr(self, f.name).pin_memory()
                                for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)})


@dataclass
class CaptionBatch(_Movable):
    """A batch of (image, caption) pairs for cross-entropy training.

    features (B, N, F) float32, zero-padded; feature_mask (B, N) bool, True = real region;
    boxes (B, N, 4) float32 (zeros where an image has no boxes, and in padding);
    captions (B, T) long = ``<bos> w1..wk <eos> <pad>...``; caption_mask (B, T) bool,
    True = real token (``<bos>`` through ``<eos>``); image_ids / keys: B entries.
    """

    features: torch.Tensor
    feature_mask: torch.Tensor
    boxes: torch.Tensor
    captions: torch.Tensor
    caption_mask: torch.Tensor
    image_ids: list[Any]
    keys: list[str]

    def __len__(self) -> int:
        return self.features.shape[0]


@dataclass
class ImageBatch(_Movable):
    """A batch of images with their references (evaluation, self-critical training).

    features (B, N, F), feature_mask (B, N), boxes (B, N, 4) as in :class:`CaptionBatch`;
    references[b] = token lists of image b's captions, raw_references[b] = their raw text;
    reference_ids[b] = their word ids when the dataset has a vocab, else None.
    """

    features: torch.Tensor
    feature_mask: torch.Tensor
    boxes: torch.Tensor
    image_ids: list[Any]
    keys: list[str]
    references: list[list[list[str]]]
    raw_references: list[list[str]]
    reference_ids: list[list[list[int]]] | None = None

    def __len__(self) -> int:
        return self.features.shape[0]


def pad_regions(regions: Sequence[torch.Tensor], boxes: Sequence[torch.Tensor | None],
                keys: Sequence[str] = ()) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad B images of N_b regions each -> features (B, N, F), feature_mask (B, N), boxes (B, N, 4)."""
    if not regions:
        raise ValueError("cannot collate an empty batch: expected at least one item")
    widths = {r.shape[1] if r.dim() == 2 else None for r in regions}
    if len(widths) != 1 or None in widths:
        raise ValueError(f"expected every image's regions to be (N, F) with one F, found shapes "
                         f"{[tuple(r.shape) for r in regions][:8]}; the batch mixes feature stores?")
    counts = [r.shape[0] for r in regions]
    if min(counts) < 1:
        bad = [k for k, n in zip(keys, counts) if n < 1] or ["?"]
        raise ValueError(f"expected at least one region per image, found none for image {bad[0]!r}; "
                         "re-extract its features")
    b, n, f = len(regions), max(counts), widths.pop()
    features = regions[0].new_zeros((b, n, f))
    mask = torch.zeros((b, n), dtype=torch.bool)
    box_out = torch.zeros((b, n, 4), dtype=torch.float32)
    for i, (r, bx) in enumerate(zip(regions, boxes)):
        features[i, : r.shape[0]] = r
        mask[i, : r.shape[0]] = True
        if bx is not None:
            box_out[i, : bx.shape[0]] = bx
    return features, mask, box_out


def pad_captions(captions: Sequence[torch.Tensor], pad_id: int = Vocab.pad_id) -> tuple[torch.Tensor, torch.Tensor]:
    """B id sequences of length T_b -> captions (B, T) long padded with ``pad_id``, caption_mask (B, T)."""
    t = max(len(c) for c in captions)
    out = torch.full((len(captions), t), pad_id, dtype=torch.long)
    mask = torch.zeros((len(captions), t), dtype=torch.bool)
    for i, c in enumerate(captions):
        out[i, : len(c)] = c
        mask[i, : len(c)] = True
    return out, mask


def collate_captions(items: Sequence[CaptionItem]) -> CaptionBatch:
    """``CaptionItem``s -> :class:`CaptionBatch` (variable regions and caption lengths)."""
    keys = [it.key for it in items]
    features, feature_mask, boxes = pad_regions([it.regions for it in items], [it.boxes for it in items], keys)
    captions, caption_mask = pad_captions([it.caption for it in items])
    return CaptionBatch(features, feature_mask, boxes, captions, caption_mask, [it.image_id for it in items], keys)


def collate_images(items: Sequence[ImageItem]) -> ImageBatch:
    """``ImageItem``s -> :class:`ImageBatch` (variable regions; references kept as lists)."""
    keys = [it.key for it in items]
    features, feature_mask, boxes = pad_regions([it.regions for it in items], [it.boxes for it in items], keys)
    ids = None if any(it.reference_ids is None for it in items) else [it.reference_ids for it in items]
    return ImageBatch(features, feature_mask, boxes, [it.image_id for it in items], keys,
                      [it.references for it in items], [it.raw_references for it in items], ids)
