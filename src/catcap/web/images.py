"""Finding the image file of each image id, and small JPEG copies of images (no torch).

Shared by ``catcap report`` and ``catcap human-eval create``. An image id is found through the
references file: a Karpathy split file names ``filepath``/``filename`` per image (looked for at
``DIR/filepath/filename``, then ``DIR/filename``), COCO annotations name ``file_name`` in their
``images`` list. Where the file names none, ``DIR/<image_id>`` with a usual image extension is
tried.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any, Iterable

from catcap.metrics.files import read_json

EXTENSIONS = (".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG", ".webp", ".bmp")


def _karpathy_names(images: list) -> dict[Any, list[str]]:
    """{image id (as catcap.metrics.files keys it): candidate relative paths}."""
    names = {}
    for img in images:
        if not isinstance(img, dict) or "filename" not in img:
            continue
        key = img.get("cocoid", img.get("imgid", img.get("filename")))
        filename = str(img["filename"])
        names[key] = [str(Path(str(img["filepath"])) / filename), filename] if img.get("filepath") else [filename]
    return names


def _coco_names(images: list) -> dict[Any, list[str]]:
    return {img["id"]: [str(img["file_name"])] for img in images
            if isinstance(img, dict) and "id" in img and "file_name" in img}


def file_names(refs_path: str | Path) -> dict[Any, list[str]]:
    """{image id: candidate file names relative to the image folder} from a references file
    (empty when the file names no files)."""
    data = read_json(refs_path, "references")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        return {}
    images = data["images"]
    if images and isinstance(images[0], dict) and "sentences" in images[0]:
        return _karpathy_names(images)
    return _coco_names(images)


def check_folder(images_dir: str | Path) -> Path:
    """The image folder as a Path; an error if it is not an existing folder."""
    folder = Path(images_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist (or is not a folder); "
                                "pass --images DIR, the folder of the dataset's image files")
    return folder


def find_images(ids: Iterable, refs_path: str | Path, images_dir: str | Path) -> dict[Any, Path]:
    """{image id: existing file} for every id; a missing folder or file is an error naming
    what was looked for (checked before any long work)."""
    folder = check_folder(images_dir)
    names = file_names(refs_path)
    found, missing = {}, []
    for image_id in ids:
        candidates = [folder / n for n in names.get(image_id, [])]
        candidates += [folder / f"{image_id}{ext}" for ext in EXTENSIONS] + [folder / str(image_id)]
        hit = next((c for c in candidates if c.is_file()), None)
        if hit is None:
            missing.append(candidates[0].name)
        else:
            found[image_id] = hit
    if missing:
        shown = ", ".join(missing[:3]) + (f", ... ({len(missing)} in all)" if len(missing) > 3 else "")
        raise FileNotFoundError(
            f"{len(missing)} image(s) are not in {folder} (looked for e.g. {shown}); expected the files the "
            f"references name ('filename'/'filepath' of a Karpathy file, 'file_name' of COCO annotations) "
            f"or <image_id>.jpg / .png; check --images")
    return found


def jpeg_thumbnail(path: str | Path, max_side: int, quality: int = 82) -> bytes:
    """The image at ``path`` shrunk to at most ``max_side`` pixels per side, as JPEG bytes."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img.draft("RGB", (max_side, max_side))  # JPEG: decode at a reduced scale directly
            img = img.convert("RGB")
            img.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=quality, optimize=True)
            return buf.getvalue()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
        raise ValueError(f"{path} is not a readable image ({err}); expected a JPEG/PNG/... file; "
                         "replace or remove it") from None


def data_uri(jpeg: bytes) -> str:
    """A ``data:`` URI of JPEG bytes (for self-contained HTML)."""
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
