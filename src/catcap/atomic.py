"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never a part.

Every file catcap writes in one piece goes through :func:`atomic_path`: the data goes to a
uniquely named hidden temporary file in the target's folder (the same file system, so the final
``os.replace`` is atomic), is flushed to disk (``durable=True``, the default), gets the
permissions a plain ``open(path, "w")`` would give (``mkstemp`` alone makes files private), and
is renamed over the target. On any error, Ctrl-C included, the temporary file is removed and
the target is left as it was. Folders (checkpoints, worlds, feature stores) are swapped whole
by their writers on top of this (``catcap.folders``, ``training.checkpoint``). The written
files are identified by :func:`sha256_file` (checkpoints, zoo cards, caption outputs).

This module imports nothing else of catcap but :mod:`catcap.faults` (a leaf too), so every layer
may use it, ``catcap.metrics`` too. Fault point ``atomic.before_rename``: the data is written and
flushed under the temporary name, the rename not done (``docs/reliability.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from catcap import faults


def _umask() -> int:
    """This process's umask, read without changing it where Linux allows."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (once, at import)
    os.umask(mask)
    return mask


_UMASK = _umask()
NEW_FILE_MODE = 0o666 & ~_UMASK  # what open(path, "w") gives a new file
NEW_DIR_MODE = 0o777 & ~_UMASK  # what os.mkdir gives; tempfile.mkdtemp makes private (0o700) folders


def _mode_for(path: Path) -> int:
    """What ``open(path, "w")`` leaves: an existing file keeps its mode, a new one gets the umask's."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return NEW_FILE_MODE


@contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; when the block ends without an error, the file
    written there replaces ``path``. For writers that take a file name (ONNX export, savez)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode_for(path))
        if durable:
            fsync_file(tmp)
        faults.point("atomic.before_rename")
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not err.filename:  # a full disk in write(): say which file it was
            err.filename = str(path)
        raise


@contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, durable: bool = True) -> Iterator[IO[Any]]:
    """``with atomic_write(path) as f: f.write(...)``: an open file (``mode`` "w", UTF-8 text,
    or "wb") that replaces ``path`` when the block ends without an error."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' (text) or 'wb' (bytes), got {mode!r}")
    with atomic_path(path, durable=durable) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_json_atomic(path: str | os.PathLike, data, *, indent: int | None = 1) -> None:
    """Write ``data`` as JSON (UTF-8, non-ASCII kept, newline at the end) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def fsync_file(path: str | os.PathLike) -> None:
    """Flush a written file's data to disk (for files written by other libraries' savers)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB blocks): checkpoints, zoo cards and
    caption outputs identify weights by it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
