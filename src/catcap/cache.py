"""The one folder catcap caches things in (compiled metric jars, ONNX exports, the course data).

``$CATCAP_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/catcap`` (an absolute XDG_CACHE_HOME,
as the XDG spec requires), else ``~/.cache/catcap``. A leaf module: imports nothing of catcap.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_CACHE_DIR = "CATCAP_CACHE_DIR"


def cache_root() -> Path:
    """catcap's cache folder (not created here)."""
    explicit = os.environ.get(ENV_CACHE_DIR)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "catcap"
