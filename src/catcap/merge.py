"""Join the parts of a sharded job into the file one process would have written (``catcap merge``).

A job split with ``--shard I/N`` or torchrun (:mod:`catcap.sharding`) leaves one part per shard
next to its output, e.g. ``feats.part-000-of-002.h5`` and ``feats.part-001-of-002.h5``.
:func:`merge` checks that every part is there, finished and of the same kind, then writes the
output atomically, by its suffix:

- ``.h5`` / ``.hdf5`` (``catcap extract``): a feature store written by the same writer, in the
  same order (each part's images in the order they were written), so a fresh merge is byte for
  byte the one-process store. Every part must come from the same encoder and key scheme. An
  existing output is continued like ``catcap extract`` continues it (images it already holds
  with the same features are skipped; other features under a held key are refused), or
  replaced with ``replace=True``. The ``.errors.txt`` lists of the parts are joined too.
- ``.jsonl`` (``catcap caption --output``): the parts' lines, concatenated in shard order.
- ``.json`` (``catcap evaluate --checkpoint --save-results``): the COCO result lists joined and
  written as the one-process run writes them (byte for byte the same file).

The parts (and their error lists) are removed after a successful merge unless ``keep_parts``.
:func:`finish_sharded` is what a sharded command calls at its end: under torchrun every rank
waits for the others and rank 0 merges; with ``--shard`` it says what to run once all are done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from catcap.atomic import atomic_write, write_json_atomic
from catcap.sharding import Shard, find_parts, torchrun_shard

FEATURE_SUFFIXES = (".h5", ".hdf5")
Log = Callable[[str], None] | None
MERGE_TIMEOUT_S = 6 * 3600  # how long rank 0 waits for the slowest rank to finish its shard


@dataclass
class MergeResult:
    """What a merge did: ``out`` written from ``parts`` (``items`` images or results in all;
    ``skipped`` already in a continued store), and a ``hint`` on what to do next (or '')."""

    out: Path
    parts: list[Path]
    items: int = 0
    skipped: int = 0
    removed: list[Path] = field(default_factory=list)
    hint: str = ""


def merge(out: str | os.PathLike, *, keep_parts: bool = False, replace: bool = False, log: Log = None) -> MergeResult:
    """Join the parts of ``out`` (see the module docstring) and return what was done."""
    out = Path(out)
    kind = _kind(out)
    parts = _finished_parts(out)
    if kind == "features":
        result = _merge_features(out, parts, replace=replace, log=log)
    elif kind == "jsonl":
        result = _merge_jsonl(out, parts)
    else:
        result = _merge_results(out, parts)
    if not keep_parts:
        result.removed = _remove_parts(parts)
    return result


def _kind(out: Path) -> str:
    suffix = out.suffix.lower()
    if suffix in FEATURE_SUFFIXES:
        return "features"
    if suffix in (".jsonl", ".json"):
        return suffix[1:]
    raise ValueError(f"cannot merge {out}: expected a feature store (.h5), caption results (.jsonl) or COCO "
                     f"results (.json), found a {suffix or 'suffix-less'} file; give the output path the "
                     "sharded command was given (e.g. catcap merge feats.h5)")


def _finished_parts(out: Path) -> list[Path]:
    """The parts of ``out`` in shard order, each a finished file (an unfinished ``.partial`` is refused)."""
    pattern = f"{out.stem}.part-*-of-*{out.suffix}.partial"
    unfinished = sorted(out.parent.glob(pattern)) if out.parent.is_dir() else []
    if unfinished:
        raise ValueError(f"{len(unfinished)} part(s) of {out} are unfinished (e.g. {unfinished[0].name}): expected "
                         "every shard to have finished; run the unfinished shards again (they continue), then merge")
    return find_parts(out)


def _remove_parts(parts: list[Path]) -> list[Path]:
    """Delete the merged parts and their error lists; returns what was removed."""
    removed = []
    for part in parts:
        for path in (part, _errors_path(part)):
            if path.exists():
                path.unlink()
                removed.append(path)
    return removed


# --- feature stores ---------------------------------------------------------------------------

def _errors_path(path: Path) -> Path:
    return path.with_name(path.name + ".errors.txt")


def _part_header(part: Path) -> tuple[int, dict]:
    """(feature_dim, meta) of one part, with a clear error when it is not a catcap feature store."""
    from catcap.data.features import open_feature_store

    with open_feature_store(part) as store:
        return store.feature_dim, store.meta


def _check_same_header(parts: list[Path]) -> tuple[int, dict]:
    """The parts' common (feature_dim, meta); an error naming the odd part otherwise."""
    first_dim, first_meta = _part_header(parts[0])
    for part in parts[1:]:
        dim, meta = _part_header(part)
        if dim != first_dim or meta != first_meta:
            diff = sorted(k for k in set(meta) | set(first_meta) if meta.get(k) != first_meta.get(k))
            what = f"feature width {dim} vs {first_dim}" if dim != first_dim else \
                "; ".join(f"{k}: {meta.get(k)!r} vs {first_meta.get(k)!r}" for k in diff)
            raise ValueError(f"the parts of one store must come from the same extraction, but {part.name} differs "
                             f"from {parts[0].name} ({what}); extract that shard again with the same --encoder and "
                             "--dataset/keys as the others (--restart), then merge")
    return first_dim, first_meta


def _written_order(store) -> list[str]:
    """A part's keys in the order they were written: by the file position of each image's regions
    (HDF5 lists a group's members by name, which is not the order of the image list)."""
    from catcap.data.feature_base import escape_key

    images = store._images
    return sorted(store.keys(), key=lambda k: images[escape_key(k)]["regions"].id.get_offset() or 0)


def _merge_features(out: Path, parts: list[Path], *, replace: bool, log: Log) -> MergeResult:
    """Copy every part's images, in order, into ``out`` through the store's own writer."""
    from catcap.data.feature_base import content_sha256
    from catcap.data.features import HDF5FeatureWriter, open_feature_store

    dim, meta = _check_same_header(parts)
    result = MergeResult(out=out, parts=parts)
    with HDF5FeatureWriter(out, dim, meta, resume=not replace, overwrite=replace) as writer:
        held = writer.written_keys()
        for part in parts:
            with open_feature_store(part) as store:
                for key in _written_order(store):
                    feats = store.get(key)
                    if key in held:
                        _check_held(out, part, key, content_sha256(feats), writer)
                        result.skipped += 1
                        continue
                    writer.write(key, feats.regions, feats.boxes)
                    result.items += 1
        if not result.items and not held:
            writer.discard_if_empty()
            raise ValueError(f"none of the {len(parts)} parts of {out} holds an image (every image was unreadable; "
                             f"see {', '.join(_errors_path(p).name for p in parts[:2])}): nothing was written; "
                             "expected image files PIL can open: check --images")
    _join_errors(out, parts)
    if log:
        log(f"merged {len(parts)} parts into {out}: {result.items} images"
            + (f" ({result.skipped} already there)" if result.skipped else ""))
    return result


def _check_held(out: Path, part: Path, key: str, sha: str, writer) -> None:
    """An image ``out`` already holds must hold the same features as the part's."""
    from catcap.data.feature_base import escape_key

    group = writer._images[escape_key(key)]
    held = group.attrs.get("sha256")
    held = held.decode() if isinstance(held, bytes) else held
    if held is not None and held != sha:
        raise ValueError(f"{out} already holds image {key!r} with other features than {part.name}; expected the "
                         "same extraction: merge with --replace to replace the store with the parts")


def _join_errors(out: Path, parts: list[Path]) -> None:
    """``out.errors.txt`` = the parts' lists in shard order (removed when none has one, as extract does)."""
    text = "".join(_errors_path(p).read_text(encoding="utf-8") for p in parts if _errors_path(p).exists())
    target = _errors_path(out)
    if text:
        with atomic_write(target) as f:
            f.write(text)
    elif target.exists():
        target.unlink()


# --- result files -----------------------------------------------------------------------------

def _merge_jsonl(out: Path, parts: list[Path]) -> MergeResult:
    """Concatenate JSON Lines parts (each checked: one JSON object per line, ending in a newline)."""
    result = MergeResult(out=out, parts=parts)
    with atomic_write(out, "wb") as f:
        for part in parts:
            data = part.read_bytes()
            lines = data.splitlines()
            for number, line in enumerate(lines, 1):
                _check_jsonl_line(part, number, line)
            if data and not data.endswith(b"\n"):
                raise ValueError(f"{part} does not end with a newline: expected a finished JSON Lines file "
                                 "(was it cut short?); run that shard again, then merge")
            f.write(data)
            result.items += len(lines)
    return result


def _check_jsonl_line(part: Path, number: int, line: bytes) -> None:
    try:
        value = json.loads(line)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ValueError(f"{part} line {number} is not a JSON object: expected one {{\"image\": ..., \"caption\": "
                         f"...}} per line, found {line[:60]!r}; run that shard again, then merge")


def _merge_results(out: Path, parts: list[Path]) -> MergeResult:
    """Join COCO result lists ([{"image_id", "caption"}]) and write them as the one-process run does."""
    joined, seen = [], {}
    for part in parts:
        for entry in _read_results(part):
            if entry["image_id"] in seen:
                raise ValueError(f"image {entry['image_id']} is in both {seen[entry['image_id']]} and {part.name}: "
                                 "expected each image in one part only; were the parts made from different "
                                 "--split or dataset? run them again, then merge")
            seen[entry["image_id"]] = part.name
            joined.append(entry)
    write_json_atomic(out, joined)
    hint = (f"score it: catcap evaluate --results {out} --refs DATASET.json --split SPLIT "
            "(the dataset and split the shards captioned)")
    return MergeResult(out=out, parts=parts, items=len(joined), hint=hint)


def _read_results(part: Path) -> list[dict]:
    try:
        data = json.loads(part.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"{part} is not JSON ({err}): expected a COCO result list written by catcap evaluate "
                         "--checkpoint --save-results; run that shard again, then merge") from None
    if not isinstance(data, list) or not all(isinstance(e, dict) and "image_id" in e and "caption" in e for e in data):
        raise ValueError(f"{part} is not a COCO result list: expected [{{\"image_id\": ..., \"caption\": ...}}, ...]; "
                         "run that shard again, then merge")
    return data


# --- the end of a sharded command ----------------------------------------------------------------

def finish_sharded(out: str | os.PathLike, shard: Shard, *, replace: bool = False, keep_parts: bool = False,
                   log: Log = None) -> MergeResult | None:
    """Call at the end of a sharded command, after its part of ``out`` is written.

    The whole job (one process): nothing to do, returns None. Under torchrun: every rank waits
    for all the others (the gloo group is joined for this only, and left after), then rank 0
    merges and returns the MergeResult (the other ranks None). With ``--shard`` (no process
    group): logs what to run once every shard is done and returns None.
    """
    if shard.whole:
        return None
    if torchrun_shard() != shard:
        if log:
            log(f"wrote part {shard} of {out}; when all {shard.count} shards are done, join them: catcap merge {out}"
                + (" --replace" if replace and Path(out).suffix.lower() in FEATURE_SUFFIXES else ""))
        return None
    return _merge_after_barrier(Path(out), shard, replace=replace, keep_parts=keep_parts, log=log)


def _merge_after_barrier(out: Path, shard: Shard, *, replace: bool, keep_parts: bool, log: Log):
    """torchrun: all ranks meet (every part is written), rank 0 merges, every rank leaves the group."""
    import torch.distributed as dist

    from catcap.training.distributed import barrier, setup_distributed, teardown

    joined = not dist.is_initialized()
    ctx = setup_distributed("cpu", timeout_s=MERGE_TIMEOUT_S) if joined else _current_context()
    try:
        barrier(ctx)
    finally:
        if joined:
            teardown(ctx, wait=False)
    if shard.index != 0:
        return None
    return merge(out, keep_parts=keep_parts, replace=replace, log=log)


def _current_context():
    """The DistContext of a process group the command joined itself (e.g. for captioning)."""
    import torch.distributed as dist

    from catcap.training.distributed import DistContext

    return DistContext(dist.get_rank(), dist.get_world_size())
