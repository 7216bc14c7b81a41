"""Where the notebook's data lives: ``$MML_DATA_DIR`` or a folder in the user cache."""

from __future__ import annotations

import os
from pathlib import Path

ENV_DATA_DIR = "MML_DATA_DIR"


def data_dir() -> Path:
    """The course-layout data folder (not created here).

    ``$MML_DATA_DIR`` when set, else ``<catcap's cache>/mml/coco_captioning`` (catcap's cache:
    ``$CATCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/catcap``, else ``~/.cache/catcap``). Build it
    with ``python -m mml.build_data``.
    """
    from catcap.cache import cache_root

    explicit = os.environ.get(ENV_DATA_DIR)
    if explicit:
        return Path(explicit).expanduser()
    return cache_root() / "mml" / "coco_captioning"
