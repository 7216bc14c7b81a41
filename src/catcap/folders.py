"""Replacing a whole output folder safely: build it in a temporary sibling, then swap it in."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from catcap import faults
from catcap.atomic import NEW_DIR_MODE


def aside(out: Path) -> Path:
    """Where :func:`replace_folder` keeps the old ``out`` while the new one is renamed in."""
    return out.with_name(f".{out.name}.old")


def replace_folder(tmp: Path, out: Path) -> None:
    """Move the finished folder ``tmp`` to ``out``, replacing an existing ``out``: the old one is
    renamed aside (:func:`aside`) first and removed only after the new one is in place, so a
    kill in between leaves a complete old folder there (``restore_aside`` puts it back)."""
    old = None
    if out.exists():
        old = aside(out)
        shutil.rmtree(old, ignore_errors=True)  # left by an earlier kill
        os.replace(out, old)
        faults.point("folder.between_renames")
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def restore_aside(out: Path) -> None:
    """After a kill between :func:`replace_folder`'s two renames: put the old folder back."""
    old = aside(out)
    if not out.exists() and old.exists():
        try:
            os.replace(old, out)
        except FileNotFoundError:  # another process (a torchrun rank) put it back first
            pass


@contextlib.contextmanager
def building_folder(out: Path) -> Iterator[Path]:
    """``with building_folder(out) as tmp:`` write everything into ``tmp`` (a hidden sibling of
    ``out``); on a clean exit it becomes ``out`` (the umask's folder mode, replacing an old one), on an error it
    is removed and ``out`` is untouched."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        os.chmod(tmp, NEW_DIR_MODE)
        replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
