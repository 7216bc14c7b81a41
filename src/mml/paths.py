"""Where the notebook's data lives: ``$MML_DATA_DIR`` or a folder in the user cache."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATA_DIR = "MML_DATA_DIR"


def data_dir() -> Path:
    """The course-layout data folder (not created here).

    ``$MML_DATA_DIR`` when set, else ``$XDG_CACHE_HOME/catcap/mml/coco_captioning``, else
    ``~/.cache/catcap/mml/coco_captioning``. Build it with ``python -m mml.build_data``.
    """
    explicit = os.environ.get(ENV_DATA_DIR)
    if explicit:
        return Path(explicit).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME")
    root = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return root / "catcap" / "mml" / "coco_captioning"
