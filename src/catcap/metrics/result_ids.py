"""Which image id a photo file stands for: the id its reference file gives it, else the rule of
its file name that ``catcap import`` applies.

``catcap caption`` writes ``{"image": "photos/1000268201_693b08cb0e.jpg", "image_id": 1000268201,
"caption": ...}``; ``catcap evaluate``, ``compare``, ``report`` and ``human-eval`` score such a
record by its ``image_id``, and find the id of a record that has only its ``image`` path the same
way (an older caption file, or one written without the ids):

1. the reference file, when given: a Karpathy split file names each image's ``filename`` (and
   ``filepath``) next to its id (``cocoid``, else ``imgid``, else the file name itself, as
   :func:`catcap.metrics.files.parse_references` keys them); COCO annotations name
   ``file_name`` per image ``id``;
2. else the file name (:func:`id_from_file_name`): a Flickr photo id, the integer before the
   first ``_`` or ``.`` (``1000268201_693b08cb0e.jpg`` -> 1000268201, as ``catcap import
   flickr8k`` numbers Flickr8k and Flickr30k; ``12.png`` -> 12), or a COCO file name's id
   (``COCO_val2014_000000391895.jpg`` -> 391895, COCO's own id, as ``catcap import coco``).

No torch and no other catcap layer (the metrics layer's rule, docs/architecture.md).
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Mapping, Optional

ImageId = Any  # int or str, as the reference file writes it

FLICKR_RULE = "the Flickr photo id: the integer before the first '_' or '.' of the file name"
COCO_RULE = "a COCO file name's id (COCO_val2014_000000391895.jpg -> 391895)"
_COCO_NAME = re.compile(r"^COCO_[A-Za-z]+\d*_(\d+)\.\w+$")


def flickr_photo_id(name: str) -> Optional[int]:
    """The integer before the first ``_`` or ``.`` of a file name (``1000268201_693b08cb0e.jpg``
    -> 1000268201), or None when the name does not start with digits there."""
    prefix = re.split(r"[_.]", PurePath(name).name, maxsplit=1)[0]
    return int(prefix) if prefix.isdigit() else None


def id_from_file_name(name: str) -> Optional[int]:
    """The image id a file name carries (module doc, rule 2), or None."""
    base = PurePath(str(name)).name
    coco = _COCO_NAME.match(base)
    if coco:
        return int(coco.group(1))
    return flickr_photo_id(base)


def id_from_key(key: str) -> ImageId:
    """A feature-store key as an image id: catcap's stores key images by ``str(image_id)``, so
    digits are the integer id, anything else the key itself."""
    return int(key) if key.isdigit() else key


def reference_file_ids(data: Any, source: str = "references") -> dict[str, ImageId]:
    """``{file name: image id}`` of a parsed reference file (module doc, rule 1): both the bare
    file name and ``filepath/filename`` of a Karpathy file, COCO annotations' ``file_name`` per
    ``id`` (``{}`` when they list no images). The file is checked by the validators every reader
    of these formats uses (:mod:`catcap.metrics.schemas`): a file that ``catcap evaluate`` would
    refuse is refused here with the same message (the file, the entry, the key)."""
    from catcap.metrics.schemas import coco_annotations, coco_image_files, karpathy_images, reference_format

    out: dict[str, ImageId] = {}
    if reference_format(data, source) == "coco":
        coco_annotations(data, source)
        if "images" in data:
            out.update((name, image_id) for image_id, name in coco_image_files(data, source))
        return out
    for img in karpathy_images(data, source):
        out[img.filename] = img.image_id
        if img.entry.get("filepath"):
            out[f"{img.entry['filepath']}/{img.filename}"] = img.image_id
    return out


class ImageIds:
    """Image path -> image id, by the reference file's names first, then the file-name rule."""

    def __init__(self, by_name: Mapping[str, ImageId] | None = None, source: str | None = None):
        self.by_name = dict(by_name or {})
        self.source = source  # the reference file the names come from (for messages)

    @classmethod
    def from_references(cls, data: Any, source: str) -> "ImageIds":
        return cls(reference_file_ids(data, source), source)

    def of(self, image: str) -> Optional[ImageId]:
        """The id of the photo at path ``image`` (None when neither rule gives one)."""
        path = PurePath(str(image))
        for name in (f"{path.parent.name}/{path.name}", path.name):
            if name in self.by_name:
                return self.by_name[name]
        return id_from_file_name(path.name)

    def how(self) -> str:
        """The rules tried, for a message when none gave an id."""
        first = f"a file name listed in {self.source}, " if self.source else ""
        return f"{first}{FLICKR_RULE}, or {COCO_RULE}"
