"""``image_from_url``: an image as a uint8 array, from a local path or a URL; None on failure."""

from __future__ import annotations

import io
import os
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image

from mml.paths import data_dir

__all__ = ["ENV_OFFLINE", "image_from_url", "load_image"]

ENV_OFFLINE = "MML_OFFLINE"
TIMEOUT_S = 5.0


def image_from_url(url) -> Optional[np.ndarray]:
    """(H, W, 3) or (H, W) uint8 image, or ``None`` when it cannot be had. Never raises.

    Tried in order: ``url`` as a local path (or ``file://`` URL); for http(s) URLs a local
    copy ``<data dir>/images/<file name>``; then the download itself (5 s timeout), unless
    ``$MML_OFFLINE`` is set to 1. Anything that fails (no network, missing file, not an
    image) gives ``None``, which the notebook skips.
    """
    try:
        for path in _local_candidates(str(url)):
            if path.is_file():
                return load_image(path.read_bytes())
        if _is_web(str(url)) and os.environ.get(ENV_OFFLINE, "0").strip() not in ("1", "true", "yes"):
            with urllib.request.urlopen(str(url), timeout=TIMEOUT_S) as response:
                return load_image(response.read())
    except Exception:  # noqa: BLE001 - the documented contract is "None, never an exception"
        return None
    return None


def load_image(data: bytes) -> np.ndarray:
    """Encoded image bytes (PNG, JPEG, ...) -> uint8 array (H, W[, C])."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB") if image.mode not in ("RGB", "L") else image)


def _is_web(url: str) -> bool:
    return urllib.parse.urlparse(url).scheme in ("http", "https")


def _local_candidates(url: str) -> list[Path]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        return [Path(urllib.request.url2pathname(parsed.path))]
    if _is_web(url):
        return [data_dir() / "images" / Path(parsed.path).name] if parsed.path else []
    return [Path(url)] if url else []
