"""The validators of the reference formats, one set for every reader (issue 40): ``catcap
evaluate``, ``compare`` and ``report`` (:mod:`catcap.metrics.files`), ``prepare``, ``train``,
``extract --dataset`` and the other Karpathy readers (:mod:`catcap.data.karpathy`) and ``import
coco`` (:mod:`catcap.data.importers`) check a file with these functions, so a file one of them
refuses is refused by all, with the same message: the file, the entry and the key, what was
expected and what was found.

* Karpathy split files (``dataset_coco.json``): ``{"images": [{"filename", "split",
  "sentences": [{"raw"} or {"tokens"}], "cocoid" or "imgid"}]}``; image ids unique.
* COCO caption annotations (``captions_val2014.json``): ``{"annotations": [{"image_id",
  "caption"}]}`` (plus ``"images": [{"id", "file_name"}]`` for the importer).

Each takes the error class of its caller (``MetricInputError`` here, ``KarpathyFormatError`` in
the data layer, ...): the same words, the layer's own type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catcap.metrics.errors import MetricInputError

__all__ = ["KarpathyImage", "reference_format", "karpathy_images", "coco_annotations", "coco_image_files", "is_image_id"]

KARPATHY_SHAPE = ('an object with an "images" list (entries with "filename", "split", "sentences" and '
                  '"cocoid" or "imgid")')


@dataclass
class KarpathyImage:
    """One validated entry of a Karpathy file: ``texts[j]`` the text of sentence j (its ``raw``,
    else its joined ``tokens``), ``tokens[j]`` the file's own tokens when it has no ``raw``
    (None otherwise); ``entry`` the whole object (its other fields)."""

    index: int
    image_id: int | str
    filename: str
    split: str
    texts: list[str]
    tokens: list[list[str] | None]
    entry: dict


def is_image_id(value: Any) -> bool:
    """An image id as the files write it: an integer or a text, never a boolean."""
    return isinstance(value, (int, str)) and not isinstance(value, bool)


def _short(value: Any, width: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def reference_format(data: Any, source: str, error: type[Exception] = MetricInputError) -> str:
    """"coco" (an object with an "annotations" list) or "karpathy" (with an "images" list); any
    other document is refused, naming the file and what it holds."""
    if isinstance(data, dict) and isinstance(data.get("annotations"), list):
        return "coco"
    if isinstance(data, dict) and isinstance(data.get("images"), list):
        return "karpathy"
    raise error(f"{source}: expected a COCO annotation file (an object with an 'annotations' list) or a Karpathy "
                f"split file (an object with an 'images' list whose entries have 'sentences'); found "
                f"{type(data).__name__}{' with keys ' + str(sorted(data)[:8]) if isinstance(data, dict) else ''}")


def karpathy_images(data: Any, source: str, error: type[Exception] = MetricInputError) -> list[KarpathyImage]:
    """Every entry of a Karpathy split file, validated; ``error`` names the file, the entry
    (``images[3] (id 42)``) and the key at fault."""
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        found = f"an object with keys {sorted(data)[:8]}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise error(f"{source}: expected a Karpathy split file, {KARPATHY_SHAPE}; found {found}")
    images = [_karpathy_entry(entry, i, source, error) for i, entry in enumerate(data["images"])]
    first: dict[str, int] = {}
    dups = []
    for im in images:
        key = str(im.image_id)
        if key in first:
            dups.append(f"id {im.image_id!r} (images[{first[key]}] and images[{im.index}])")
        first.setdefault(key, im.index)
    if dups:
        raise error(f"{source}: expected one entry per image id, found {len(dups)} id(s) used more than once: "
                    f"{'; '.join(dups[:3])}{' ...' if len(dups) > 3 else ''}; image ids key the feature store and "
                    "the scores, so they must be unique (42 and \"42\" are one key)")
    return images


def _karpathy_entry(entry: Any, i: int, source: str, error) -> KarpathyImage:
    where = f"{source}: images[{i}]"
    if not isinstance(entry, dict):
        raise error(f"{where}: expected an object, found {type(entry).__name__} {_short(entry)}")
    key = "cocoid" if "cocoid" in entry else "imgid"
    image_id = entry.get(key)
    if not is_image_id(image_id):
        raise error(f"{where}: expected an integer \"cocoid\" or \"imgid\", found "
                    + (f"\"{key}\": {_short(image_id)}" if key in entry else f"neither (keys: {sorted(entry)})"))
    where = f"{source}: images[{i}] (id {image_id!r})"
    for name, kind in (("filename", str), ("split", str), ("sentences", list)):
        if not isinstance(entry.get(name), kind):
            found = f"{type(entry[name]).__name__} {_short(entry[name])}" if name in entry else "no such key"
            raise error(f"{where}: expected \"{name}\" to be a {kind.__name__}, found {found}")
    texts, tokens = [], []
    for j, sent in enumerate(entry["sentences"]):
        if isinstance(sent, dict) and isinstance(sent.get("raw"), str):
            texts.append(sent["raw"])
            tokens.append(None)
            continue
        given = sent.get("tokens") if isinstance(sent, dict) else None
        if isinstance(given, list) and all(isinstance(t, str) for t in given):
            texts.append(" ".join(given))
            tokens.append(list(given))
            continue
        raise error(f"{where}.sentences[{j}]: expected an object with a string \"raw\" (or a list of string "
                    f"\"tokens\"), found {_short(sent)}")
    return KarpathyImage(i, image_id, entry["filename"], entry["split"], texts, tokens, entry)


def coco_annotations(data: Any, source: str, error: type[Exception] = MetricInputError,
                     int_ids: bool = False) -> list[tuple[int | str, str, dict]]:
    """``(image_id, caption, entry)`` of every annotation of a COCO caption file, validated
    (``int_ids``: the ids must be integers, as COCO's own files have them)."""
    if not isinstance(data, dict) or not isinstance(data.get("annotations"), list):
        found = f"an object with keys {sorted(data)[:8]}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise error(f"{source}: expected a COCO caption file, an object with an \"annotations\" list (entries with "
                    f"\"image_id\" and \"caption\"); found {found}")
    out = []
    for i, ann in enumerate(data["annotations"]):
        where = f"{source}: annotations[{i}]"
        if not isinstance(ann, dict):
            raise error(f"{where}: expected an object with \"image_id\" and \"caption\", found {_short(ann)}")
        image_id, caption = ann.get("image_id"), ann.get("caption")
        if not (isinstance(image_id, int) and not isinstance(image_id, bool) if int_ids else is_image_id(image_id)):
            found = _short(image_id) if "image_id" in ann else f"no such key (keys: {sorted(ann)[:8]})"
            raise error(f"{where}: expected \"image_id\" to be {'an integer' if int_ids else 'an integer or a text'}, "
                        f"found {found}")
        if not isinstance(caption, str):
            found = f"{type(caption).__name__} {_short(caption)}" if "caption" in ann else "no such key"
            raise error(f"{where} (image_id {image_id!r}): expected \"caption\" to be a string, found {found}")
        out.append((image_id, caption, ann))
    return out


def coco_image_files(data: Any, source: str, error: type[Exception] = MetricInputError) -> list[tuple[int, str]]:
    """``(id, file_name)`` of every entry of a COCO file's ``"images"`` list, validated."""
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise error(f"{source}: expected an \"images\" list of {{\"id\", \"file_name\"}} objects, found "
                    f"{type(images).__name__}")
    out = []
    for i, img in enumerate(images):
        iid = img.get("id") if isinstance(img, dict) else None
        name = img.get("file_name") if isinstance(img, dict) else None
        if not isinstance(iid, int) or isinstance(iid, bool) or not isinstance(name, str):
            raise error(f"{source}: images[{i}]: expected an object with an integer \"id\" and a string "
                        f"\"file_name\", found {_short(img, 100)}")
        out.append((iid, name))
    return out
