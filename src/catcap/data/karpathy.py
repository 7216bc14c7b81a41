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

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from catcap.data.text import caption_tokens
from catcap.metrics.errors import MetricInputError
from catcap.metrics.files import read_json

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
    """:func:`load_karpathy` on already-parsed JSON."""
    images = _images(data, source)
    records = [_record(entry, i, restval_as_train, source) for i, entry in enumerate(images)]
    _check_unique_ids(records, source)
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


def _images(data: Any, source: str) -> list:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        found = f"an object with keys {sorted(data)[:8]}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise KarpathyFormatError(
            f"{source}: expected a Karpathy split file, an object with an \"images\" list "
            f"(entries with \"filename\", \"split\", \"sentences\" and \"cocoid\" or \"imgid\"); found {found}"
        )
    return data["images"]


def _record(entry: Any, i: int, restval_as_train: bool, source: str) -> ImageRecord:
    where = f"{source}: images[{i}]"
    if not isinstance(entry, dict):
        raise KarpathyFormatError(f"{where}: expected an object, found {type(entry).__name__}")
    image_id = entry.get("cocoid", entry.get("imgid"))
    if image_id is None or isinstance(image_id, bool) or not isinstance(image_id, (int, str)):
        raise KarpathyFormatError(f"{where}: expected an integer \"cocoid\" or \"imgid\", found "
                                  f"{image_id!r} (keys: {sorted(entry)})")
    where = f"{source}: images[{i}] (id {image_id!r})"
    for name, kind in (("filename", str), ("split", str), ("sentences", list)):
        if not isinstance(entry.get(name), kind):
            raise KarpathyFormatError(f"{where}: expected \"{name}\" to be a {kind.__name__}, "
                                      f"found {entry.get(name)!r:.80}")
    raw, captions = [], []
    for j, sent in enumerate(entry["sentences"]):
        text, tokens = _sentence(sent, f"{where}.sentences[{j}]")
        raw.append(text)
        captions.append(tokens)
    extra = {k: v for k, v in entry.items() if k not in _KNOWN}
    split = entry["split"]
    if split == "restval" and restval_as_train:
        split, extra["karpathy_split"] = "train", "restval"
    return ImageRecord(image_id, entry["filename"], split, captions, raw, extra)


def _sentence(sent: Any, where: str) -> tuple[str, list[str]]:
    if isinstance(sent, dict) and isinstance(sent.get("raw"), str):
        return sent["raw"], caption_tokens(sent["raw"])
    tokens = sent.get("tokens") if isinstance(sent, dict) else None
    if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
        return " ".join(tokens), list(tokens)
    raise KarpathyFormatError(f"{where}: expected an object with a string \"raw\" (or a list of string \"tokens\"), "
                              f"found {sent!r:.80}")


def _check_unique_ids(records: list[ImageRecord], source: str) -> None:
    counts = Counter(r.key for r in records)
    dups = [k for k, c in counts.items() if c > 1]
    if dups:
        raise KarpathyFormatError(
            f"{source}: expected one entry per image id, found {len(dups)} id(s) used more than once "
            f"({', '.join(dups[:5])}); image ids key the feature store, so they must be unique"
        )
