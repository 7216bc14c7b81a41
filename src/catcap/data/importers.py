"""Importers: official caption files -> a Karpathy-format dataset dict.

:func:`import_flickr8k` reads Flickr8k's ``Flickr8k.token.txt`` and its split lists
(``Flickr_8k.trainImages.txt`` ...); :func:`import_coco` reads COCO's
``captions_train2014.json`` / ``captions_val2014.json`` plus split lists. Both return the
dict that :func:`catcap.data.karpathy.load_karpathy` reads::

    {"dataset": "flickr8k",
     "images": [{"filename": "1000268201_693b08cb0e.jpg", "filepath": "", "imgid": 1000268201,
                 "split": "train", "sentids": [0, 1, 2, 3, 4],
                 "sentences": [{"raw": "A child in a pink dress ...", "tokens": ["a", "child", ...],
                                "imgid": 1000268201, "sentid": 0}, ...]}, ...],
     "catcap_import": {"source": ..., "splits": {"train": 6000, ...}, "warnings": [...]}}

(COCO entries also carry ``"cocoid"``, which is then the image id.)  ``load_karpathy`` ignores
the ``catcap_import`` report; it records where the file came from and what was left out.

Choices (see ``docs/datasets.md``):

* ``tokens`` are :func:`catcap.data.text.caption_tokens` of ``raw``, the evaluation's PTB
  tokens. A caption with no token left (empty or punctuation only) is dropped with a warning.
* Flickr image ids: the Flickr photo id, i.e. the integer before the first ``_`` of the file
  name (``1000268201_693b08cb0e.jpg`` -> 1000268201), so an image keeps its id whichever splits
  are imported. When some name has no such integer prefix, or two names share one, every image
  gets instead its 0-based position in the sorted list of file names (with a warning).
* COCO image ids are COCO's own ``id`` (``cocoid``); ``imgid`` is the position in the output.
* Images are written sorted by file name (Flickr) or by COCO id; sentences in the order of the
  caption file (Flickr: ``#0..#4``; COCO: annotation id); ``sentid`` counts from 0 over the file.
* Problems that lose data without making the result wrong (an image with no caption, a captioned
  image in no split, a listed image missing from ``images_dir``) are warnings: the image is left
  out and the report says which. Problems that would make it wrong (a malformed line, one image
  in two splits, a caption given twice) are errors that name the file and line.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from catcap.atomic import write_text_atomic
from catcap.data.text import caption_tokens
from catcap.metrics.schemas import coco_annotations, coco_image_files
from catcap.metrics.result_ids import flickr_photo_id

__all__ = ["DatasetImportError", "import_flickr8k", "import_coco", "write_dataset_json"]

#: How many names a warning lists before it says "... and N more".
_SHOW = 10


class DatasetImportError(ValueError):
    """An input file of an importer that cannot be used (missing, malformed, contradictory)."""



def write_dataset_json(path: str | Path, dataset: Mapping[str, Any]) -> Path:
    """Write a dataset dict as UTF-8 JSON, atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    write_text_atomic(path, json.dumps(dataset, ensure_ascii=False, separators=(",", ":")) + "\n")
    return path


# -- shared helpers -----------------------------------------------------------------------

def _read_lines(path: Path, what: str, how: str) -> list[str]:
    if not path.is_file():
        raise DatasetImportError(f"{what} not found: {path} ({'a folder' if path.exists() else 'no such file'}); "
                                 f"expected {how}")
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as err:
        raise DatasetImportError(f"{what} {path} is not UTF-8 text ({err}); expected {how}") from None


def _names(items: Iterable[str]) -> str:
    items = list(items)
    shown = ", ".join(map(str, items[:_SHOW]))
    return shown + (f" ... and {len(items) - _SHOW} more" if len(items) > _SHOW else "")


def _read_split_lists(split_lists: Mapping[str, str | Path]) -> dict[str, list[tuple[str, int]]]:
    """{split: [(entry, line number)]}; blank lines skipped, an entry listed twice in one file is an error."""
    if not split_lists:
        raise DatasetImportError("no split lists given; expected at least one, e.g. {'train': "
                                 "'Flickr_8k.trainImages.txt', 'val': 'Flickr_8k.devImages.txt'}")
    out: dict[str, list[tuple[str, int]]] = {}
    for split, path in split_lists.items():
        if not isinstance(split, str) or not split.strip():
            raise DatasetImportError(f"split names must be non-empty strings, found {split!r}")
        path = Path(path)
        lines = _read_lines(path, f"split list for {split!r}", "a text file naming one image per line")
        seen: dict[str, int] = {}
        entries = []
        for n, line in enumerate(lines, start=1):
            name = line.strip()
            if not name:
                continue
            if name in seen:
                raise DatasetImportError(f"{path}:{n}: {name!r} is listed twice in this split list "
                                         f"(first at line {seen[name]}); expected each image once")
            seen[name] = n
            entries.append((name, n))
        if not entries:
            raise DatasetImportError(f"split list for {split!r} ({path}) names no image; expected one image per line")
        out[split] = entries
    return out


def _assign_splits(lists: dict[str, list[tuple[str, int]]], split_lists: Mapping[str, str | Path],
                   key=lambda name: name) -> dict[Any, str]:
    """{key(entry): split}; an image in two splits is an error (it would leak between them)."""
    where: dict[Any, tuple[str, int]] = {}
    for split, entries in lists.items():
        for name, n in entries:
            k = key(name)
            if k in where:
                other, m = where[k]
                raise DatasetImportError(
                    f"{name!r} is in two splits: {other!r} ({split_lists[other]}:{m}) and {split!r} "
                    f"({split_lists[split]}:{n}); expected every image in one split only (an image in "
                    f"both train and val/test would leak into the evaluation)")
            where[k] = (split, n)
    return {k: s for k, (s, _) in where.items()}


def _report(source: dict, images: list[dict], warnings: list[str], **more) -> dict:
    splits = Counter(e["split"] for e in images)
    return {"source": source, "splits": dict(sorted(splits.items())),
            "captions": sum(len(e["sentences"]) for e in images), **more, "warnings": warnings}


def _sentences(raws: list[str], imgid: int, next_sentid: int, label: str,
               dropped: list[str]) -> list[dict]:
    out = []
    for raw in raws:
        tokens = caption_tokens(raw)
        if not tokens:
            dropped.append(f"{label}: {raw!r}")
            continue
        out.append({"raw": raw, "tokens": tokens, "imgid": imgid, "sentid": next_sentid + len(out)})
    return out


# -- Flickr8k -----------------------------------------------------------------------------

_TOKEN_LINE = re.compile(r"^(?P<image>[^\t#]+)#(?P<k>\d+)\t(?P<caption>.*)$")


def import_flickr8k(token_file: str | Path, split_lists: Mapping[str, str | Path],
                    images_dir: str | Path | None = None, *, unsplit: str | None = None,
                    dataset: str = "flickr8k") -> dict:
    """Karpathy-format dict of Flickr8k (also Flickr30k: the files have the same form).

    ``token_file``: ``Flickr8k.token.txt``, lines ``<image>#<k>\\t<caption>``.
    ``split_lists``: ``{split: file naming one image per line}``, e.g. ``{"train":
    "Flickr_8k.trainImages.txt", "val": "Flickr_8k.devImages.txt", "test": "Flickr_8k.testImages.txt"}``.
    ``images_dir``: when given, listed images without a file there are left out (warning).
    ``unsplit``: captioned images in no list are left out (``None``, the default) or put in
    this split. The report (``result["catcap_import"]``) lists everything left out.
    """
    token_file = Path(token_file)
    lines = _read_lines(token_file, "caption file", "Flickr8k.token.txt: lines '<image>.jpg#<k><TAB><caption>'")
    captions: dict[str, dict[int, str]] = {}
    line_of: dict[tuple[str, int], int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        m = _TOKEN_LINE.match(line.rstrip("\r\n"))
        if m is None:
            raise DatasetImportError(
                f"{token_file}:{n}: expected '<image>.jpg#<k><TAB><caption>' (e.g. "
                f"'1000268201_693b08cb0e.jpg#0\\tA child in a pink dress ...'), found {line[:80]!r}; "
                f"is this Flickr8k.token.txt?")
        image, k = m["image"].strip(), int(m["k"])
        if (image, k) in line_of:
            raise DatasetImportError(f"{token_file}:{n}: caption {image}#{k} is given twice (first at line "
                                     f"{line_of[image, k]}); expected each '<image>#<k>' once")
        line_of[image, k] = n
        captions.setdefault(image, {})[k] = m["caption"].strip()
    if not captions:
        raise DatasetImportError(f"{token_file} holds no caption; expected lines '<image>.jpg#<k><TAB><caption>'")

    lists = _read_split_lists(split_lists)
    split_of = _assign_splits(lists, split_lists)
    warnings: list[str] = []
    no_caption = [name for name in split_of if name not in captions]
    if no_caption:
        warnings.append(f"{len(no_caption)} listed image(s) have no caption in {token_file.name} and are left "
                        f"out: {_names(no_caption)}")
    unsplit_names = sorted(name for name in captions if name not in split_of)
    if unsplit_names:
        fate = "left out" if unsplit is None else f"put in split {unsplit!r}"
        warnings.append(f"{len(unsplit_names)} captioned image(s) are in no split list and are {fate}: "
                        f"{_names(unsplit_names)}")
        if unsplit is not None:
            split_of.update({name: unsplit for name in unsplit_names})
    chosen = sorted(name for name in split_of if name in captions)
    if images_dir is not None:
        images_dir = Path(images_dir)
        if not images_dir.is_dir():
            raise DatasetImportError(f"images folder not found: {images_dir}; expected the folder holding the "
                                     f"Flickr8k .jpg files (or leave it out to skip this check)")
        missing = [name for name in chosen if not (images_dir / name).is_file()]
        if missing:
            warnings.append(f"{len(missing)} image(s) have no file in {images_dir} and are left out: {_names(missing)}")
            chosen = [name for name in chosen if name not in set(missing)]

    ids = _flickr_ids(chosen, warnings)
    images, dropped, sentid = [], [], 0
    for name in chosen:
        caps = captions[name]
        sents = _sentences([caps[k] for k in sorted(caps)], ids[name], sentid, name, dropped)
        if not sents:
            warnings.append(f"{name} has no caption with a word left after tokenisation and is left out")
            continue
        sentid += len(sents)
        images.append({"filename": name, "filepath": "", "imgid": ids[name], "split": split_of[name],
                       "sentids": [s["sentid"] for s in sents], "sentences": sents})
    if dropped:
        warnings.insert(0, f"{len(dropped)} caption(s) have no word after tokenisation and are left out: {_names(dropped)}")
    if not images:
        raise DatasetImportError(f"no image is both captioned in {token_file} and named by a split list; "
                                 f"expected the split lists to name images of the caption file "
                                 f"(e.g. '1000268201_693b08cb0e.jpg'); warnings: {'; '.join(warnings)}")
    source = {"tokens": str(token_file), "split_lists": {s: str(p) for s, p in split_lists.items()},
              "images_dir": None if images_dir is None else str(images_dir)}
    return {"dataset": dataset, "images": images,
            "catcap_import": _report(source, images, warnings, image_id_rule=ids.rule)}


class _Ids(dict):
    rule: str = ""


def _flickr_ids(names: list[str], warnings: list[str]) -> _Ids:
    """Flickr photo id (integer prefix before the first '_' or '.'), else the sorted position."""
    ids = _Ids()
    prefixes = [flickr_photo_id(name) for name in names]  # the rule catcap caption and evaluate apply to a path
    if all(p is not None for p in prefixes) and len(set(prefixes)) == len(names):
        ids.update(dict(zip(names, prefixes)))
        ids.rule = "flickr photo id (the integer before the first '_' of the file name)"
        return ids
    bad = [n for n, p in zip(names, prefixes) if p is None]
    reason = (f"{len(bad)} file name(s) do not start with a Flickr photo id ({_names(bad)})" if bad
              else "two file names share a Flickr photo id")
    warnings.append(f"image ids are positions in the sorted file names, because {reason}")
    ids.update({name: i for i, name in enumerate(sorted(names))})
    ids.rule = "position of the file name in sorted order (0-based)"
    return ids


# -- COCO ---------------------------------------------------------------------------------

_COCO_SUBSET = re.compile(r"^COCO_([A-Za-z]+\d*)_\d+\.\w+$")


def import_coco(captions_json_paths: str | Path | Iterable[str | Path],
                split_lists: Mapping[str, str | Path] | None = None, *,
                unlisted_split: str | None = "train", dataset: str = "coco") -> dict:
    """Karpathy-format dict of COCO caption files (``captions_train2014.json``, ``captions_val2014.json``).

    ``split_lists``: ``{split: file}``, each file naming images one per line, by COCO image id
    (``391895``) or file name (``COCO_val2014_000000391895.jpg``). Images in no list go to
    ``unlisted_split`` (default ``"train"``, like Karpathy's ``restval``); ``None`` leaves them out.
    Without split lists every image goes to ``unlisted_split``.
    """
    if isinstance(captions_json_paths, (str, Path)):
        captions_json_paths = [captions_json_paths]
    paths = [Path(p) for p in captions_json_paths]
    if not paths:
        raise DatasetImportError("no COCO caption file given; expected e.g. captions_train2014.json captions_val2014.json")
    files: dict[int, str] = {}
    from_file: dict[int, Path] = {}
    raws: dict[int, list[tuple[int, str]]] = {}
    warnings: list[str] = []
    for path in paths:
        data = _read_coco(path)  # checked by the validators of every COCO reader (catcap.metrics.schemas)
        for iid, name in coco_image_files(data, str(path), DatasetImportError):
            if iid in files:
                raise DatasetImportError(f"{path}: image id {iid} ({name}) is also in {from_file[iid]}; expected each "
                                         f"image in one caption file (give each file once)")
            files[iid], from_file[iid] = name, path
            raws[iid] = []
        orphans = 0
        for i, (iid, cap, ann) in enumerate(coco_annotations(data, str(path), DatasetImportError, int_ids=True)):
            if iid not in raws or from_file[iid] != path:
                orphans += 1
                continue
            order = ann.get("id", i)
            raws[iid].append((order if isinstance(order, int) else i, cap.strip()))
        if orphans:
            warnings.append(f"{orphans} annotation(s) of {path.name} name an image that is not in its \"images\" "
                            f"list and are ignored")

    split_of: dict[int, str] = {}
    if split_lists:
        by_name = {name: iid for iid, name in files.items()}
        lists = _read_split_lists(split_lists)
        def key(entry: str):
            if entry.isdigit() and int(entry) in files:
                return int(entry)
            if entry in by_name:
                return by_name[entry]
            base = Path(entry).name
            return by_name.get(base, ("unknown", entry))

        split_of = _assign_splits(lists, split_lists, key)
        unknown = [k[1] for k in split_of if isinstance(k, tuple)]
        split_of = {k: s for k, s in split_of.items() if not isinstance(k, tuple)}
        if unknown:
            warnings.append(f"{len(unknown)} listed image(s) are in none of the caption files and are left out: "
                            f"{_names(unknown)}")
    unlisted = [iid for iid in sorted(files) if iid not in split_of]
    if unlisted and split_lists:
        fate = "left out" if unlisted_split is None else f"put in split {unlisted_split!r}"
        warnings.append(f"{len(unlisted)} image(s) are in no split list and are {fate}")
    if unlisted_split is not None:
        split_of.update({iid: unlisted_split for iid in unlisted})

    images, dropped, sentid = [], [], 0
    no_caption = []
    for iid in sorted(split_of):
        caps = [c for _, c in sorted(raws[iid], key=lambda oc: oc[0])]
        if not caps:
            no_caption.append(files[iid])
            continue
        imgid = len(images)
        sents = _sentences(caps, imgid, sentid, files[iid], dropped)
        if not sents:
            warnings.append(f"{files[iid]} has no caption with a word left after tokenisation and is left out")
            continue
        sentid += len(sents)
        m = _COCO_SUBSET.match(files[iid])
        images.append({"filepath": m.group(1) if m else "", "filename": files[iid], "imgid": imgid,
                       "split": split_of[iid], "sentids": [s["sentid"] for s in sents], "sentences": sents,
                       "cocoid": iid})
    if no_caption:
        warnings.append(f"{len(no_caption)} image(s) have no caption and are left out: {_names(no_caption)}")
    if dropped:
        warnings.insert(0, f"{len(dropped)} caption(s) have no word after tokenisation and are left out: {_names(dropped)}")
    if not images:
        raise DatasetImportError(f"no captioned image to write from {', '.join(map(str, paths))}; "
                                 f"warnings: {'; '.join(warnings) or 'none'}")
    source = {"captions": [str(p) for p in paths],
              "split_lists": {s: str(p) for s, p in (split_lists or {}).items()}, "unlisted_split": unlisted_split}
    return {"dataset": dataset, "images": images,
            "catcap_import": _report(source, images, warnings, image_id_rule="COCO image id (cocoid)")}


def _read_coco(path: Path) -> dict:
    how = "a COCO captions file such as captions_train2014.json (\"images\" with id/file_name, " \
          "\"annotations\" with image_id/caption)"
    if not path.is_file():
        raise DatasetImportError(f"COCO caption file not found: {path}; expected {how}")
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as err:
        raise DatasetImportError(f"{path} is not UTF-8 ({err}); expected {how}") from None
    except json.JSONDecodeError as err:
        raise DatasetImportError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); expected {how}") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) or not isinstance(data.get("annotations"), list):
        found = f"an object with keys {sorted(data)[:8]}" if isinstance(data, dict) else f"a {type(data).__name__}"
        raise DatasetImportError(f"{path}: expected {how}; found {found}")
    return data
