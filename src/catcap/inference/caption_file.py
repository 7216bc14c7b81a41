"""The JSON Lines file of ``catcap caption --output FILE``, written incrementally and resumable.

Finished file: one line per image, in input order, nothing else (so ``catcap merge`` joins the
parts of a sharded run by concatenating them in shard order)::

    {"image": "photos/a.jpg", "caption": "a dog runs on the grass"}
    {"image": "photos/b.jpg", "caption": null, "error": "UnidentifiedImageError: cannot identify image file ..."}

Each line is ``json.dumps(row, ensure_ascii=False) + "\\n"``, deterministic. While it runs, the
lines go to ``FILE.partial``: its first line is a header ``{"catcap_caption": {settings}}``
(model weights' sha256, beam, max_len, batch size, feature store, shard), then the result
lines, appended after every batch (flushed and fsync'ed). At the end the result lines are
copied to a temporary file that replaces ``FILE`` atomically and the partial is removed.

A rerun after an interruption keeps the partial's complete lines (a torn last line is
dropped) if its header has the same settings and its images are exactly the first images of
this run, rounded down to whole batches (so every batch is the same as in an uninterrupted
run, and the file is the same byte for byte), and captions only the rest; anything else is
refused with an error saying how to go on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Sequence

from catcap import faults
from catcap.atomic import atomic_write

HEADER = "catcap_caption"


def partial_path(out: str | os.PathLike) -> Path:
    """Where ``out`` is built: ``out`` + ``.partial``."""
    out = Path(out)
    return out.with_name(out.name + ".partial")


def result_line(row: dict) -> str:
    """One result row as its line of the file."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def read_partial(path: Path) -> tuple[dict | None, list[dict], int]:
    """(header settings or None, complete result rows, byte length of header + those rows). A
    last line without its newline, or that is not JSON, is torn: not counted."""
    data = path.read_bytes()
    settings, rows, end = None, [], 0
    for number, raw in enumerate(data.splitlines(keepends=True)):
        if not raw.endswith(b"\n"):
            break
        try:
            obj = json.loads(raw)
        except ValueError:
            if end + len(raw) == len(data):  # a torn last line (a kill inside a write)
                break
            raise ValueError(f"{path}: line {number + 1} is not JSON; expected the partial of `catcap caption "
                             "--output` (a header line, then one JSON object per line): delete it or use --restart") from None
        if number == 0:
            settings = obj.get(HEADER) if isinstance(obj, dict) else None
            if not isinstance(settings, dict):
                return None, [], 0
        else:
            rows.append(obj)
        end += len(raw)
    return settings, rows, end


def _changed(old: dict, new: dict) -> str:
    keys = sorted(set(old) | set(new))
    return ", ".join(f"{k}: {old.get(k)!r} then, {new.get(k)!r} now" for k in keys if old.get(k) != new.get(k))


def resume_point(path: Path, settings: dict, items: Sequence[str], batch_size: int) -> int:
    """How many of ``items`` the partial ``path`` already holds (whole batches of ``batch_size``);
    the partial is cut back to them. ValueError when it cannot be continued."""
    found, rows, end = read_partial(path)
    how = f"delete {path} (or pass --restart) to start over"
    if found is None:
        raise ValueError(f"{path} does not start with a {{\"{HEADER}\": ...}} header line, so it was not written "
                         f"by `catcap caption --output`; {how}")
    if found != settings:
        raise ValueError(f"{path} was started with other settings ({_changed(found, settings)}); rerun with the "
                         f"same checkpoint, --beam, --max-len, --batch-size and --features to continue it, or {how}")
    if len(rows) > len(items):
        raise ValueError(f"{path} already holds {len(rows)} results but this run has only {len(items)} images; "
                         f"continue it with the same inputs, or {how}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("image") != items[i]:
            got = row.get("image") if isinstance(row, dict) else row
            raise ValueError(f"{path} does not continue these inputs: its result {i + 1} is for {got!r}, but this "
                             f"run's image {i + 1} is {items[i]!r}; continue it with the same inputs (same order), "
                             f"or {how}")
    keep = len(rows) // batch_size * batch_size
    if keep < len(rows):  # an incomplete batch (a torn write): redo it whole
        end = len(result_line({HEADER: settings}).encode()) + sum(len(result_line(r).encode()) for r in rows[:keep])
    _truncate(path, end)
    return keep


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


class CaptionFile:
    """``out`` being written: :meth:`open` (new or continued), :meth:`append` each batch,
    :meth:`finish` (atomic rename into place)."""

    def __init__(self, out: str | os.PathLike, settings: dict):
        self.out, self.settings = Path(out), dict(settings)
        self.partial = partial_path(out)
        self._file = None

    def open(self, items: Sequence[str], batch_size: int, *, restart: bool = False) -> int:
        """Start ``out.partial`` (or continue it unless ``restart``); returns how many of
        ``items`` are already done."""
        if self.out.suffix.lower() != ".jsonl":
            raise ValueError(f"expected --output to end in .jsonl (JSON Lines), found {self.out}; e.g. --output "
                             "captions.jsonl")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        done = 0
        if self.partial.exists() and not restart:
            done = resume_point(self.partial, self.settings, items, batch_size)
        else:
            with open(self.partial, "w", encoding="utf-8", newline="\n") as f:
                f.write(result_line({HEADER: self.settings}))
                f.flush()
                os.fsync(f.fileno())
        self._file = open(self.partial, "a", encoding="utf-8", newline="\n")
        return done

    def append(self, rows: Iterable[dict]) -> None:
        """One batch's rows appended, flushed and fsync'ed (fault point ``caption.after_batch``)."""
        self._file.write("".join(result_line(r) for r in rows))
        self._file.flush()
        os.fsync(self._file.fileno())
        faults.point("caption.after_batch")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def discard(self) -> None:
        """Close and remove the partial without touching ``out``."""
        self.close()
        self.partial.unlink(missing_ok=True)

    def finish(self) -> Path:
        """The result lines (the partial without its header) replace ``out`` atomically; the
        partial is removed. Returns ``out``."""
        self.close()
        with open(self.partial, "rb") as src, atomic_write(self.out, "wb") as dst:
            src.readline()  # the header
            for line in src:
                dst.write(line)
        self.partial.unlink()
        return self.out


def count_lines(path: Path) -> int:
    """Result lines in a finished file."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)
