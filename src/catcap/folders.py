"""Replacing a whole output folder safely: build it in a temporary sibling, then swap it in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def replace_folder(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out``, replacing an existing ``out``: the old one is
    renamed aside first and removed only after the new one is in place."""
    old = None
    if out.is_dir():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old)
