"""Import the region-feature formats users already have into a catcap feature store.

Readers yield ``(key, regions (N, F), boxes (N, 4) or None)``; :func:`import_features` writes
them with :class:`~catcap.data.features_hdf5.HDF5FeatureWriter` (atomic, resumable: keys already
in an interrupted output are skipped). Nothing is unpickled: npy/npz are read with
``allow_pickle=False``.

Formats:

- ``tsv``: bottom-up attention TSV files (Anderson et al.), one image per line with the fields
  ``image_id, image_w, image_h, num_boxes, boxes, features``; ``boxes`` and ``features`` are
  base64-encoded float32 arrays (num_boxes x 4 and num_boxes x F).
- ``npy``: a folder of ``<key>.npy`` (N, F) or ``<key>.npz`` files (array ``feat``,
  ``features`` or ``x``; boxes from ``boxes``/``bbox`` in the npz or from
  ``--boxes DIR/<key>.npy``), as self-critical.pytorch's ``cocobu_att`` / ``cocobu_box``.
- ``m2``: the M2 Transformer's single HDF5 file with datasets ``<image_id>_features`` (and
  ``<image_id>_boxes`` when present).
- ``lmdb``: an LMDB database whose keys are image keys and whose values are ``.npy`` or
  ``.npz`` bytes (the layout of self-critical.pytorch's LMDB features).
"""

from __future__ import annotations

import base64
import csv
import io
import sys
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np

from catcap.data.feature_base import FeatureStoreError
from catcap.progress import progress_bar

FORMATS = ("tsv", "npy", "m2", "lmdb")
TSV_FIELDS = ("image_id", "image_w", "image_h", "num_boxes", "boxes", "features")
Item = tuple[str, np.ndarray, "np.ndarray | None"]

# what --source must be, per format (for the messages of check_source)
LAYOUTS = {
    "tsv": "bottom-up attention TSV file(s): one image per line with the tab-separated fields "
           + ", ".join(TSV_FIELDS),
    "npy": "a folder of <image_id>.npy (N, F) or <image_id>.npz files, one per image",
    "m2": "the M2 Transformer's HDF5 file, with datasets <image_id>_features (+ <image_id>_boxes)",
    "lmdb": "an LMDB database: a folder holding data.mdb (or that data file itself) whose values are "
            ".npy/.npz bytes",
}


def _sources(fmt: str, source) -> list[Path]:
    if fmt == "tsv" and not isinstance(source, (str, Path)):
        return [Path(s) for s in source]
    if not isinstance(source, (str, Path)):
        source = list(source)
        if len(source) != 1:
            raise FeatureStoreError(f"--format {fmt} reads one source, found {len(source)} "
                                    f"({', '.join(map(str, source[:3]))}{', ...' if len(source) > 3 else ''}); "
                                    f"give {LAYOUTS[fmt]}")
        source = source[0]
    return [Path(source)]


def check_source(fmt: str, source, boxes_dir=None) -> None:
    """Refuse, before anything is read or written, a ``source`` that cannot be ``fmt``: a missing
    path (FileNotFoundError), a file where a folder is expected or the reverse, an npy folder with
    no .npy/.npz, an m2 file that is not HDF5, an LMDB folder with no data.mdb (FeatureStoreError).
    Every message names the layout ``fmt`` expects."""
    if fmt not in FORMATS:
        raise FeatureStoreError(f"unknown feature format {fmt!r}; choose one of {', '.join(FORMATS)}")
    expected = f"--format {fmt} expects {LAYOUTS[fmt]}"
    paths = _sources(fmt, source)
    if not paths:
        raise FeatureStoreError(f"no source given; {expected}")
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist; {expected}. Check the --source path")
        if fmt in ("tsv", "m2") and path.is_dir():
            raise FeatureStoreError(f"{path} is a folder; {expected}")
        if fmt == "npy":
            if not path.is_dir():
                raise FeatureStoreError(f"{path} is a file, not a folder; {expected}")
            if not any(p.suffix in (".npy", ".npz") for p in path.iterdir()):
                raise FeatureStoreError(f"{path} holds no .npy or .npz files; {expected}")
        if fmt == "m2" and not h5py.is_hdf5(path):
            raise FeatureStoreError(f"{path} is not an HDF5 file; {expected}")
        if fmt == "lmdb" and path.is_dir() and not (path / "data.mdb").is_file():
            raise FeatureStoreError(f"{path} is a folder without data.mdb, so not an LMDB database; {expected}")
    if boxes_dir is not None:
        if fmt != "npy":
            raise FeatureStoreError(f"--boxes (boxes_dir) is read with --format npy only; the {fmt} source "
                                    "carries its own boxes. Leave --boxes out")
        if not Path(boxes_dir).is_dir():
            raise FileNotFoundError(f"boxes folder {boxes_dir} does not exist or is not a folder; expected a "
                                    "folder of <image_id>.npy box arrays (N, 4)")


def read_tsv(paths) -> Iterator[Item]:
    """Bottom-up attention TSV file(s) -> (image_id, features, boxes)."""
    csv.field_size_limit(sys.maxsize)
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        with open(path, newline="", encoding="utf-8") as f:
            for line_no, row in _tsv_rows(f, path):
                if len(row) != len(TSV_FIELDS):
                    raise FeatureStoreError(f"{path}:{line_no}: expected {len(TSV_FIELDS)} tab-separated fields "
                                            f"({', '.join(TSV_FIELDS)}), found {len(row)}")
                try:
                    n = int(row[3])
                    boxes = np.frombuffer(base64.b64decode(row[4]), dtype=np.float32).reshape(n, 4)
                    feats = np.frombuffer(base64.b64decode(row[5]), dtype=np.float32).reshape(n, -1)
                except (ValueError, TypeError) as err:
                    raise FeatureStoreError(f"{path}:{line_no}: cannot decode image {row[0]!r} ({err}); expected "
                                            "base64 float32 boxes (num_boxes x 4) and features (num_boxes x F)") from None
                yield str(int(row[0])) if row[0].isdigit() else row[0], feats, boxes


def _tsv_rows(f, path) -> Iterator[tuple[int, list]]:
    reader = csv.reader(f, delimiter="\t")
    line_no = 0
    try:
        for line_no, row in enumerate(reader, start=1):
            yield line_no, row
    except (UnicodeDecodeError, csv.Error) as err:
        raise FeatureStoreError(f"{path}:{line_no + 1}: not a text TSV file ({err}); expected "
                                f"{LAYOUTS['tsv']}") from None


def _array(data, where: str, names=("feat", "features", "x")) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return data
    for name in names:
        if name in data.files:
            return data[name]
    raise FeatureStoreError(f"{where}: no feature array; expected one named {', '.join(names)}, found {', '.join(data.files)}")


def _boxes_of(data, boxes_dir: Path | None, key: str):
    if not isinstance(data, np.ndarray):
        for name in ("boxes", "bbox"):
            if name in data.files:
                return data[name]
    if boxes_dir is not None:
        path = boxes_dir / f"{key}.npy"
        if path.exists():
            return np.load(path, allow_pickle=False)
    return None


def read_npy_dir(folder, boxes_dir=None) -> Iterator[Item]:
    """A folder of ``<key>.npy`` / ``<key>.npz`` -> (key, features, boxes or None)."""
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise FeatureStoreError(f"{folder}: no .npy or .npz files; expected one file per image named by its key")
    for path in files:
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise FeatureStoreError(f"{path}: not a plain numpy file ({err}); pickled arrays are never loaded") from None
        yield path.stem, _array(data, str(path)), _boxes_of(data, Path(boxes_dir) if boxes_dir else None, path.stem)


def read_m2(path) -> Iterator[Item]:
    """M2's HDF5 (``<id>_features``, optional ``<id>_boxes``) -> (id, features, boxes or None)."""
    with h5py.File(path, "r") as f:
        keys = sorted(k[: -len("_features")] for k in f.keys() if k.endswith("_features"))
        if not keys:
            raise FeatureStoreError(f"{path}: no '<image_id>_features' datasets; is this an M2 feature file?")
        for key in keys:
            boxes = f[f"{key}_boxes"][()] if f"{key}_boxes" in f else None
            yield key, f[f"{key}_features"][()], boxes


def read_lmdb(path) -> Iterator[Item]:
    """LMDB with ``.npy``/``.npz`` bytes as values -> (key, features, boxes or None)."""
    try:
        import lmdb
    except ImportError:
        raise FeatureStoreError("reading LMDB features needs the `lmdb` package: pip install lmdb") from None
    try:
        env = lmdb.open(str(path), readonly=True, lock=False, subdir=Path(path).is_dir())
    except lmdb.Error as err:
        raise FeatureStoreError(f"cannot open {path} as LMDB ({err}); expected {LAYOUTS['lmdb']}") from None
    try:
        with env.begin() as txn:
            for raw_key, value in txn.cursor():
                try:
                    key = raw_key.decode("utf-8")
                except UnicodeDecodeError:
                    raise FeatureStoreError(f"{path}: key {raw_key[:40]!r} is not UTF-8 text; expected image keys "
                                            "such as b'391895' as the LMDB keys") from None
                try:
                    data = np.load(io.BytesIO(value), allow_pickle=False)
                except (ValueError, OSError, EOFError) as err:
                    raise FeatureStoreError(f"{path}: value of {key!r} is not .npy/.npz bytes ({err}); "
                                            "pickled values are never loaded") from None
                yield key, _array(data, f"{path}[{key}]"), _boxes_of(data, None, key)
    except lmdb.Error as err:
        raise FeatureStoreError(f"cannot read {path} as LMDB ({err}); expected {LAYOUTS['lmdb']}") from None
    finally:
        env.close()


def read_features(fmt: str, source, boxes_dir=None) -> Iterator[Item]:
    """The reader of format ``fmt`` (one of FORMATS) over ``source`` (checked by :func:`check_source`)."""
    check_source(fmt, source, boxes_dir)
    if fmt != "tsv":
        source = _sources(fmt, source)[0]
    if fmt == "tsv":
        return read_tsv(source)
    if fmt == "npy":
        return read_npy_dir(source, boxes_dir)
    if fmt == "m2":
        return read_m2(source)
    if fmt == "lmdb":
        return read_lmdb(source)
    raise FeatureStoreError(f"unknown feature format {fmt!r}; choose one of {', '.join(FORMATS)}")


def import_features(fmt: str, source, out, *, boxes_dir=None, progress: bool = True,
                    overwrite: bool = False) -> dict:
    """Convert ``source`` (format ``fmt``) into the HDF5 store ``out``; an interrupted import
    resumes (keys already written are skipped). ``overwrite=True`` (CLI: ``--restart``) starts
    again and replaces ``out`` when the new store is complete (until then the old one stays).
    The source is checked (:func:`check_source`) before ``out`` is touched.
    Returns {"written", "skipped", "feature_dim", "out"}."""
    from catcap.data.features_hdf5 import HDF5FeatureWriter

    out = Path(out)
    if out.is_dir():
        raise FeatureStoreError(f"--out {out} is a folder; expected the path of an HDF5 feature file "
                                "(e.g. data/coco/features.h5). Choose a file name")
    items = read_features(fmt, source, boxes_dir)
    resolved = out.resolve()
    for path in _sources(fmt, source):
        if path.resolve() == resolved:
            raise FeatureStoreError(f"--out {out} is the source itself; write the catcap store to another file")
    first = next(items, None)
    if first is None:
        raise FeatureStoreError(f"{source}: no images found; expected {LAYOUTS[fmt]}")
    key, feats, boxes = first
    dim = int(np.asarray(feats).shape[-1])
    # continue an earlier import, skipping done keys, unless told to start again
    resume = not overwrite and (out.exists() or out.with_name(out.name + ".partial").exists())
    written = skipped = 0
    meta = {"source_format": fmt, "source": str(source)}
    writer = HDF5FeatureWriter(out, dim, meta, resume=resume, overwrite=overwrite)
    bar = progress_bar(desc=f"import {fmt}", unit="img", enabled=progress)
    try:
        done = writer.written_keys()
        for key, feats, boxes in _chain(first, items):
            if key in done:
                skipped += 1
            else:
                writer.write(key, np.asarray(feats, dtype=np.float32), None if boxes is None else np.asarray(boxes, dtype=np.float32))
                written += 1
            bar.update(1)
    except BaseException:
        writer.discard_if_empty()  # refused before any image: no empty .partial is left (one with images resumes)
        raise
    finally:
        bar.close()
    writer.close()
    return {"written": written, "skipped": skipped, "feature_dim": dim, "out": str(out)}


def _chain(first: Item, rest: Iterator[Item]) -> Iterator[Item]:
    yield first
    yield from rest
