"""Karpathy split files (``dataset_coco.json``, ``dataset_flickr8k.json``, ``dataset_flickr30k.json``,
the built-in world's ``dataset_shapes.json``) as typed records.

The format::

    {"images": [{"filename": "COCO_val2014_000000391895.jpg", "split": "test",
                 "cocoid": 391895, "imgid": 0,
                 "sentences": [{"raw": "A man riding a bike.", "tokens": ["a", "man", ...]}, ...]},
                ...]}

* ``image_id`` is ``cocoid`` when present (COCO), else ``imgid`` (Flickr, shapes); the feature
  store key of an image is ``str(image_id)`` (:attr:`ImageRecord.key`).
* Caption tokens are ``caption_tokens(raw)`` (:mod:`catcap.data.text`), the tokenizer of the
  evaluation, so training and evaluation see the same words. The file's own ``tokens`` field
  is used only for a sentence without ``raw`` (its ``raw`` then becomes the joined tokens).
* ``restval`` (the 30,504 COCO val2014 images outside Karpathy's val/test) is training data by
  Karpathy's convention: with ``restval_as_train=True`` (the default) those images get split
  ``"train"`` (113,287 COCO training images) and keep ``extra["karpathy_split"] == "restval"``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from catcap.data.text import caption_tokens
from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import read_json
from catcap.metrics.schemas import KarpathyImage, karpathy_images

__all__ = ["ImageRecord", "KarpathyFormatError", "load_karpathy", "parse_karpathy", "split_counts"]

_KNOWN = {"filename", "split", "sentences", "cocoid", "imgid"}


class KarpathyFormatError(ValueError):
    """A Karpathy split file that cannot be read (not JSON, wrong schema, missing split, ...)."""


@dataclass
class ImageRecord:
    """One image of a split file with its captions.

    ``captions[j]`` are the tokens of ``raw[j]``; ``extra`` holds the entry's other fields
    (``filepath``, ``sentids``, ...).
    """

    image_id: int | str
    filename: str
    split: str
    captions: list[list[str]]
    raw: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The feature-store key of this image: ``str(image_id)``."""
        return str(self.image_id)


def load_karpathy(path: str | Path, splits: str | Iterable[str] | None = None,
                  restval_as_train: bool = True) -> dict[str, list[ImageRecord]]:
    """Records of a Karpathy split file, grouped by split, in file order.

    ``splits``: one split name or several; ``None`` keeps every split. A requested split
    with no image is an error that lists the splits the file has.
    """
    return parse_karpathy(_read_json(Path(path)), splits, restval_as_train, source=str(path))


def parse_karpathy(data: Any, splits: str | Iterable[str] | None = None,
                   restval_as_train: bool = True, source: str = "Karpathy split file") -> dict[str, list[ImageRecord]]:
    """:func:`load_karpathy` on already-parsed JSON. The file is checked by the validator every
    reader of Karpathy files uses (:func:`catcap.metrics.schemas.karpathy_images`: ``catcap
    evaluate`` refuses what this refuses, with the same message)."""
    records = [_record(image, restval_as_train) for image in karpathy_images(data, source, KarpathyFormatError)]
    grouped: dict[str, list[ImageRecord]] = {}
    for rec in records:
        grouped.setdefault(rec.split, []).append(rec)
    if splits is None:
        return grouped
    wanted = [splits] if isinstance(splits, str) else list(splits)
    missing = [s for s in wanted if s not in grouped]
    if missing:
        raise KarpathyFormatError(
            f"{source}: no images in split(s) {', '.join(map(repr, missing))}; the file has "
            f"{_describe(grouped)}" + (" (restval was merged into train)" if restval_as_train and "restval" in missing else "")
        )
    return {s: grouped[s] for s in wanted}


def split_counts(records: dict[str, list[ImageRecord]]) -> dict[str, int]:
    """``{split: number of images}``."""
    return {s: len(r) for s, r in records.items()}


def _describe(grouped: dict[str, list[ImageRecord]]) -> str:
    if not grouped:
        return "no images at all"
    return ", ".join(f"{s} ({len(r)} images)" for s, r in sorted(grouped.items()))


def _read_json(path: Path) -> Any:
    """The shared UTF-8 JSON reader of catcap.metrics, with the data layer's error class."""
    if not Path(path).is_file():
        raise KarpathyFormatError(f"Karpathy split file not found: {path} (expected a JSON file such as "
                                  "dataset_coco.json, or one `catcap import` wrote; check the path)")
    try:
        return read_json(path, "Karpathy split")
    except MetricInputError as err:
        raise KarpathyFormatError(f"{err} (expected a Karpathy split file such as dataset_coco.json)") from None


def _record(image: KarpathyImage, restval_as_train: bool) -> ImageRecord:
    """A validated entry as a record: each caption's tokens are the evaluation's tokens of its
    ``raw`` text (the file's own ``tokens`` only for a sentence without ``raw``)."""
    captions = [given if given is not None else caption_tokens(text) for text, given in zip(image.texts, image.tokens)]
    extra = {k: v for k, v in image.entry.items() if k not in _KNOWN}
    split = image.split
    if split == "restval" and restval_as_train:
        split, extra["karpathy_split"] = "train", "restval"
    return ImageRecord(image.image_id, image.filename, split, captions, list(image.texts), extra)
