"""An index of a large reference file, so that scoring 1,000 captions reads 1,000 images'
references instead of parsing all 40,504 images of ``captions_val2014.json`` every time.

The first time a reference file of at least :data:`MIN_BYTES` is read with the ids to score,
it is parsed and validated in full (exactly as without the index) and its references are
written, per image, to an SQLite file in catcap's cache folder (``refs/`` under
:func:`catcap.cache.cache_root`). Later reads fetch only the wanted images from it.

The index is trusted only for the same bytes: it records the file's size and CRC-32, and every
read checks both against the file as it is now (reading 32 MB and its CRC-32 take ~20 ms; the
full JSON parse ~0.4 s). Another file, an edited file or another split gets a fresh index.
``CATCAP_REF_INDEX=0`` turns the index off. A cache folder that cannot be written only costs
the speed: the references are then parsed in full, as before.

Ids keep their JSON type (``42`` and ``"42"`` are different images), as in the full parse.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import tempfile
import zlib
from pathlib import Path
from typing import Iterator, Optional, Sequence

from catcap.cache import cache_root
from catcap.metrics.files import ImageId, decode_json, load_references, parse_references

MIN_BYTES = 4 << 20  #: smaller files are parsed in full (it takes under ~50 ms)
VERSION = 1
_CHUNK = 900  # ids per query (SQLite's old limit on bound parameters is 999)


def load_wanted_references(path: str | Path, split: Optional[str],
                           wanted: Sequence[ImageId]) -> dict[ImageId, list[str]]:
    """The references of the ``wanted`` images (the ones to score): through the index where it
    applies, else :func:`~catcap.metrics.files.load_references` (every image, and its errors:
    a missing file, bad JSON, a wanted id that is not there)."""
    found = cached_references(path, split, wanted)
    return found if found is not None else load_references(path, split)


def cached_references(path: str | Path, split: Optional[str],
                      wanted: Sequence[ImageId]) -> Optional[dict[ImageId, list[str]]]:
    """``{id: refs}`` for every id of ``wanted``, through the index; None when the index is off,
    the file is small or missing, or an id is not in the file (the caller then parses in full,
    and its errors name what is wrong)."""
    path = Path(path)
    if os.environ.get("CATCAP_REF_INDEX", "1") == "0" or not path.is_file() or path.stat().st_size < MIN_BYTES:
        return None
    data = path.read_bytes()
    stamp = (len(data), zlib.crc32(data), split or "", VERSION)
    index = index_path(path, split)
    found = _lookup(index, stamp, wanted)
    if found is None:
        refs = parse_references(decode_json(data, path, "references"), split, source=str(path))
        _write_index(index, stamp, refs)
        found = {k: refs[k] for k in wanted if k in refs}
    return found if len(found) == len(set(wanted)) else None


def index_path(path: Path, split: Optional[str]) -> Path:
    """Where the index of ``path`` (and ``split``) lives: one file per absolute path and split."""
    name = hashlib.sha1(f"{path.resolve()}\0{split or ''}".encode()).hexdigest()[:20]
    return cache_root() / "refs" / f"{name}.sqlite"


def _lookup(index: Path, stamp: tuple, wanted: Sequence[ImageId]) -> Optional[dict[ImageId, list[str]]]:
    """The wanted ids' references from ``index`` if it was made from the same bytes, else None."""
    if not index.is_file():
        return None
    try:
        with _connect(f"file:{index}?mode=ro") as db:
            if tuple(db.execute("SELECT size, crc, split, version FROM stamp").fetchone() or ()) != stamp:
                return None
            keys = [json.dumps(k) for k in dict.fromkeys(wanted)]
            found = {}
            for i in range(0, len(keys), _CHUNK):
                part = keys[i:i + _CHUNK]
                rows = db.execute(f"SELECT id, refs FROM refs WHERE id IN ({','.join('?' * len(part))})", part)
                found.update((json.loads(k), json.loads(v)) for k, v in rows)
    except sqlite3.Error:  # a damaged or foreign file: rebuild it
        return None
    return {k: found[k] for k in dict.fromkeys(wanted) if k in found}


def _write_index(index: Path, stamp: tuple, refs: dict[ImageId, list[str]]) -> None:
    """Write the index atomically (a temporary file renamed in); silently skipped when the cache
    folder cannot be written."""
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=index.name + ".", suffix=".tmp", dir=index.parent)
        os.close(fd)
    except OSError:
        return
    try:
        with _connect(tmp) as db:
            db.execute("CREATE TABLE stamp (size INTEGER, crc INTEGER, split TEXT, version INTEGER)")
            db.execute("INSERT INTO stamp VALUES (?, ?, ?, ?)", stamp)
            db.execute("CREATE TABLE refs (id TEXT PRIMARY KEY, refs TEXT) WITHOUT ROWID")
            db.executemany("INSERT INTO refs VALUES (?, ?)",
                           ((json.dumps(k), json.dumps(v, ensure_ascii=False)) for k, v in refs.items()))
        os.replace(tmp, index)
    except (OSError, sqlite3.Error):
        Path(tmp).unlink(missing_ok=True)


@contextlib.contextmanager
def _connect(target: str) -> Iterator[sqlite3.Connection]:
    """``with _connect(target) as db``: an SQLite connection, committed on success and closed."""
    db = sqlite3.connect(target, uri=target.startswith("file:"))
    try:
        with db:  # commits, or rolls back on an error
            yield db
    finally:
        db.close()
