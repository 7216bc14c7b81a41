"""Reading caption results and references, with errors that say how to fix the file.

Results: the COCO result format, a JSON list of ``{"image_id": ..., "caption": "..."}``, or
what ``catcap caption`` writes: JSON Lines (``--out captions.jsonl``) or a JSON list (``--json``)
of ``{"image": path, "image_id": ..., "caption": ...}``. A record with only its ``image`` path
gets its id from the reference file or the file name (:mod:`catcap.metrics.result_ids`).
References: either the COCO annotation format (``{"annotations": [{"image_id", "caption"},
...]}``, e.g. ``captions_val2014.json``) or a Karpathy split file (``dataset_coco.json``:
``{"images": [{"split", "sentences": [{"raw"}], "cocoid" | "imgid"}]}``) plus a split name.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from catcap.metrics.errors import MetricInputError
from catcap.metrics.schemas import KarpathyImage, coco_annotations, karpathy_images, reference_format
from catcap.metrics.result_ids import ImageIds

ImageId = Any  # int or str, as written in the files


def read_json(path: str | Path, what: str) -> Any:
    """Parse a UTF-8 JSON file; every failure becomes a MetricInputError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise MetricInputError(f"{what} file not found: {path} (expected a JSON file; check the path)")
    return decode_json(path.read_bytes(), path, what)


def decode_json(data: bytes, path: str | Path, what: str) -> Any:
    """The JSON value of ``data`` (the bytes of ``path``, UTF-8 with or without a BOM)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise MetricInputError(
            f"{what} file {path} is not UTF-8 text (byte {err.start} is 0x{data[err.start]:02x}); "
            f"expected UTF-8 JSON; re-save it as UTF-8 (e.g. `iconv -f latin1 -t utf-8`)"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise MetricInputError(
            f"{what} file {path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None


def _preview(items: Sequence, limit: int = 5) -> str:
    shown = ", ".join(repr(x) for x in list(items)[:limit])
    return shown + (f", ... ({len(items)} in all)" if len(items) > limit else "")


def read_results_file(path: str | Path) -> Any:
    """The records of a result file: a JSON document (the COCO result list, ``catcap caption
    --json``) or JSON Lines, one object per line (``catcap caption --out F.jsonl``)."""
    path = Path(path)
    if not path.is_file():
        raise MetricInputError(f"results file not found: {path} (expected a JSON or JSON Lines file; check the path)")
    data = path.read_bytes()
    try:
        value = decode_json(data, path, "results")
        if isinstance(value, dict) and "caption" in value and path.suffix.lower() != ".json":
            return [value]  # one line of JSON Lines (a .json file is one JSON document: the COCO result list)
        return value
    except MetricInputError as err:
        if "not UTF-8" in str(err) or not (path.suffix.lower() == ".jsonl" or "Extra data" in str(err)):
            raise
        lines = data.decode("utf-8-sig").splitlines()
        if not next((line for line in lines if line.strip()), "{").lstrip().startswith("{"):
            raise
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise MetricInputError(f"results file {path} (JSON Lines) line {number} is not JSON: {err.msg}, column "
                                   f"{err.colno}; expected one {{\"image_id\" or \"image\", \"caption\"}} object "
                                   "per line") from None
    return records


def _entry_id(entry: dict, i: int, source: str, ids: ImageIds | None):
    """The image id of one result record: its ``image_id``, else the id of its ``image`` path."""
    if "image_id" in entry:
        return entry["image_id"]
    image = entry["image"]
    image_id = (ids or ImageIds()).of(str(image))
    if image_id is None:
        how = (ids or ImageIds()).how()
        raise MetricInputError(f"{source}: entry {i} (image {image!r}) has no image_id, and none follows from its "
                               f"file name ({how}); pass the reference file with --refs, or rerun catcap caption "
                               "with --refs REFS.json, which writes the ids")
    return image_id


def parse_results(data: Any, source: str = "results", ids: ImageIds | None = None) -> dict[ImageId, str]:
    """Result records -> {image_id: caption}; duplicate ids and bad entries are errors. A record
    may name its ``image`` path instead of its ``image_id`` (``ids`` maps paths to ids)."""
    if isinstance(data, dict) and "annotations" in data:
        data = data["annotations"]
    if not isinstance(data, list):
        raise MetricInputError(
            f"{source}: expected a JSON list of {{\"image_id\": ..., \"caption\": \"...\"}} objects "
            f"(the COCO result format) or catcap caption's JSON Lines, found a {type(data).__name__}"
            + ("; one caption record is read as JSON Lines from a file named .jsonl, not .json"
               if isinstance(data, dict) and "caption" in data else "")
        )
    results: dict[ImageId, str] = {}
    keys = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or ("image_id" not in entry and "image" not in entry) or "caption" not in entry:
            found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise MetricInputError(f"{source}: entry {i} must have keys 'image_id' and 'caption' (or catcap caption's "
                                   f"'image' and 'caption'); found {found}")
        image_id, caption = _entry_id(entry, i, source, ids), entry["caption"]
        if caption is None and "error" in entry:
            raise MetricInputError(f"{source}: entry {i} (image {entry.get('image', image_id)!r}) has no caption: the "
                                   f"image could not be read ({entry['error']}); replace the image and caption it "
                                   "again, or delete that line")
        if not isinstance(caption, str):
            raise MetricInputError(f"{source}: entry {i} (image_id {image_id!r}): caption must be a string, found {type(caption).__name__}")
        if not isinstance(image_id, (int, str)) or isinstance(image_id, bool):
            raise MetricInputError(f"{source}: entry {i}: image_id must be an integer or a string, found {image_id!r}")
        results.setdefault(image_id, caption)
        keys.append(image_id)
    if len(results) != len(data):
        dup = [k for k, c in Counter(keys).items() if c > 1]
        raise MetricInputError(
            f"{source}: expected one caption per image, found duplicate image ids {_preview(dup)}; "
            f"keep one caption per image (e.g. the top beam)"
        )
    if not results:
        raise MetricInputError(f"{source}: the result list is empty; nothing to evaluate")
    return results


def parse_references(data: Any, split: str | None = None, source: str = "references") -> dict[ImageId, list[str]]:
    """COCO annotations or a Karpathy split file -> {image_id: [raw captions]}; both checked by
    the validators every reader of these formats uses (:mod:`catcap.metrics.schemas`)."""
    if reference_format(data, source) == "coco":
        refs: dict[ImageId, list[str]] = {}
        for image_id, caption, _ in coco_annotations(data, source):
            refs.setdefault(image_id, []).append(caption)
        if split is not None:
            raise MetricInputError(f"{source} is a COCO annotation file, which has no splits; drop --split {split}")
        return _nonempty(refs, source)
    return _karpathy(karpathy_images(data, source), split, source)


def _karpathy(images: list[KarpathyImage], split: str | None, source: str) -> dict[ImageId, list[str]]:
    splits = Counter(img.split for img in images)
    if split is None:
        raise MetricInputError(
            f"{source} is a Karpathy split file: name the split to evaluate with --split "
            f"(available: {', '.join(f'{k} ({v} images)' for k, v in sorted(splits.items()))})"
        )
    if split not in splits:
        raise MetricInputError(f"{source}: no images in split {split!r}; available splits: {', '.join(sorted(splits))}")
    refs = {img.image_id: img.texts for img in images if img.split == split}
    return _nonempty(refs, source)


def _nonempty(refs: dict, source: str) -> dict:
    empty = [k for k, v in refs.items() if not v]
    if empty or not refs:
        raise MetricInputError(f"{source}: every image needs at least one reference caption; none for {_preview(empty) or 'any image'}")
    return refs


def match_results(results: Mapping[ImageId, str], references: Mapping[ImageId, list[str]]) -> list[ImageId]:
    """Image ids to score (those of the results); every one must have references."""
    missing = [k for k in results if k not in references]
    if missing:
        hint = ""
        if all(isinstance(k, str) for k in missing) and any(isinstance(k, int) for k in references):
            hint = " (results use string ids, references integer ids: write image_id as a number)"
        elif all(isinstance(k, int) for k in missing) and any(isinstance(k, str) for k in references):
            hint = " (results use integer ids, references string ids)"
        raise MetricInputError(
            f"results have captions for {len(missing)} image(s) that the references do not contain: "
            f"{_preview(missing)}{hint}; evaluate against the references of the same split"
        )
    empty = [k for k in results if not references[k]]
    if empty:
        raise MetricInputError(f"every image needs at least one reference caption; none for {_preview(empty)}: "
                               "drop those images from the results or fix the references")
    return list(results)


def load_results(path: str | Path, refs: str | Path | None = None) -> dict[ImageId, str]:
    """{image_id: caption} of a result file (:func:`read_results_file`); records with only an
    ``image`` path get their ids from ``refs`` (its file names), else from the file names."""
    data = read_results_file(path)
    ids = None
    if refs is not None and isinstance(data, list) and any(isinstance(e, dict) and "image_id" not in e for e in data):
        ids = ImageIds.from_references(read_json(refs, "references"), str(refs))
    return parse_results(data, source=str(path), ids=ids)


def load_references(path: str | Path, split: str | None = None) -> dict[ImageId, list[str]]:
    """{image_id: [raw captions]} of every image of a reference file (for only the images to be
    scored, read through an index: :func:`catcap.metrics.refs_cache.load_wanted_references`)."""
    return parse_references(read_json(path, "references"), split, source=str(path))


def load_result_pair(path_a: str | Path, path_b: str | Path, purpose: str,
                     refs: str | Path | None = None) -> tuple[dict, dict]:
    """Two systems' result files on the same images -> (results A, results B in A's order); a
    clear error when they caption different images (``purpose``: what needs them paired;
    ``refs``: as :func:`load_results`)."""
    res_a, res_b = load_results(path_a, refs), load_results(path_b, refs)
    if set(res_a) != set(res_b):
        raise MetricInputError(
            f"{path_a} and {path_b} caption different images ({len(set(res_a) - set(res_b))} only in the first, "
            f"{len(set(res_b) - set(res_a))} only in the second); {purpose} needs both systems on the same images "
            "(caption the same split with both)")
    return res_a, {k: res_b[k] for k in res_a}
