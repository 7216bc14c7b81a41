"""Splitting one job (extract, caption, evaluate) over several processes or machines.

A job's work list (images, keys) is cut into ``count`` contiguous blocks; shard ``index``
(0-based, like torchrun's ``RANK``) takes block ``index``. Contiguous blocks mean that the parts,
concatenated in shard order, are exactly the one-process order, so a merge is a concatenation.

Where a shard comes from (:func:`resolve_shard`): ``--shard I/N`` on the command line, else
torchrun's ``RANK`` / ``WORLD_SIZE`` when launched by it, else the whole job (shard 0 of 1).
Each shard writes its part next to the output (:func:`part_path`), e.g. ``feats.h5`` ->
``feats.part-001-of-004.h5``; ``catcap merge`` (or rank 0 under torchrun) joins the parts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, TypeVar

T = TypeVar("T")

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_PART = re.compile(r"\.part-(\d+)-of-(\d+)$")


@dataclass(frozen=True)
class Shard:
    """Block ``index`` of ``count`` (0 <= index < count)."""

    index: int = 0
    count: int = 1

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"expected a shard I/N with 0 <= I < N, found {self.index}/{self.count}; "
                             "e.g. --shard 0/4 ... --shard 3/4 (I counts from 0, like torchrun's RANK)")

    @property
    def whole(self) -> bool:
        """True for the one-process job (shard 0 of 1)."""
        return self.count == 1

    def bounds(self, n: int) -> tuple[int, int]:
        """``[start, end)`` of this shard's block of ``n`` items (sizes differ by at most one)."""
        return self.index * n // self.count, (self.index + 1) * n // self.count

    def take(self, items: Sequence[T]) -> list[T]:
        """This shard's contiguous block of ``items``."""
        start, end = self.bounds(len(items))
        return list(items[start:end])

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` -> Shard(I, N); a clear error for anything else."""
    match = _SHARD.match(str(text))
    if not match:
        raise ValueError(f"expected --shard I/N (two whole numbers, e.g. 0/4), found {text!r}")
    return Shard(int(match.group(1)), int(match.group(2)))


def torchrun_shard() -> Optional[Shard]:
    """Shard(RANK, WORLD_SIZE) when launched by torchrun with more than one process, else None."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    return Shard(int(os.environ.get("RANK", "0")), world)


def resolve_shard(text: Optional[str]) -> Shard:
    """The shard this process runs: ``--shard`` text, else torchrun's rank, else the whole job.
    Both at once is refused (which one would be meant is not clear)."""
    launched = torchrun_shard()
    if text is not None and launched is not None:
        raise ValueError(f"--shard {text} was given under torchrun (RANK {launched.index} of {launched.count}); "
                         "use one or the other: torchrun deals the shards itself")
    if text is not None:
        return parse_shard(text)
    return launched or Shard()


def part_path(out: str | os.PathLike, shard: Shard) -> Path:
    """Where shard ``shard`` writes its part of ``out``: ``name.part-III-of-NNN.suffix``; ``out``
    itself for the whole job."""
    out = Path(out)
    if shard.whole:
        return out
    width = max(3, len(str(shard.count)))
    return out.with_name(f"{out.stem}.part-{shard.index:0{width}d}-of-{shard.count:0{width}d}{out.suffix}")


def part_paths(out: str | os.PathLike, count: int) -> list[Path]:
    """Every part of ``out`` for ``count`` shards, in shard order."""
    return [part_path(out, Shard(i, count)) for i in range(count)]


def find_parts(out: str | os.PathLike) -> list[Path]:
    """The parts of ``out`` on disk, in shard order; an error naming what is missing when the
    set is incomplete or mixes two shard counts."""
    out = Path(out)
    found: dict[int, set[int]] = {}
    if out.parent.is_dir():
        for p in out.parent.iterdir():
            if p.suffix != out.suffix:
                continue
            match = _PART.search(p.stem)
            if match and p.stem[:match.start()] == out.stem:
                found.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    if not found:
        raise FileNotFoundError(f"found no parts of {out} (expected files like {part_path(out, Shard(0, 2)).name}, "
                                "written by --shard I/N or torchrun); run every shard first")
    if len(found) > 1:
        raise ValueError(f"parts of {out} for different shard counts are mixed: {sorted(found)}; "
                         "remove the stale ones and merge again")
    count, indices = next(iter(found.items()))
    missing = sorted(set(range(count)) - indices)
    if missing:
        raise FileNotFoundError(f"{len(missing)} of {count} parts of {out} are missing (shards "
                                f"{', '.join(f'{i}/{count}' for i in missing[:5])}); run them, then merge")
    return part_paths(out, count)
