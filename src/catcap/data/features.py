"""Feature stores: per-image region (or grid) features, read by key.

Two on-disk formats share one reading protocol, :class:`FeatureStore`:

* HDF5 (the default), one file: attrs ``format="catcap-features-v1"``, ``feature_dim``,
  ``meta`` (a JSON string); one group ``/images/<key>`` per image holding the dataset
  ``regions`` (N, F) float32 and optionally ``boxes`` (N, 4) float32.
* npz directory: ``meta.json`` (format, feature_dim, meta) and one ``<key>.npz`` per image
  holding ``regions`` and optionally ``boxes`` (read with ``allow_pickle=False``).

Keys are strings (``str(image_id)`` for COCO); on disk a key is written through
:func:`escape_key` (``%XX`` escapes, reversible), so ``/``, spaces or dots are fine.
Legend: N regions of one image, F feature width; boxes are normalised ``x1, y1, x2, y2``.

Writers build ``<path>.partial`` and rename it to ``<path>`` on a clean close, so a crash
never leaves a half-written ``<path>``. ``resume=True`` reopens the ``.partial`` (or the
finished file, which is moved back to ``.partial`` until the next clean close) and appends;
``written_keys()`` says what to skip. Values (shape, width, NaN/inf) are checked when written
and again, per image, by ``get()``; :func:`check_features` does the cheap up-front checks
(missing keys, width) and deliberately does not read every array.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Protocol, Union

import h5py
import numpy as np

__all__ = [
    "FORMAT", "NPZ_FORMAT", "FeatureStore", "FeatureStoreError", "HDF5FeatureStore",
    "HDF5FeatureWriter", "ImageFeatures", "NpzDirFeatureStore", "NpzDirFeatureWriter",
    "check_features", "escape_key", "open_feature_store", "unescape_key", "validate_features",
]

FORMAT = "catcap-features-v1"
NPZ_FORMAT = "catcap-features-npz-v1"
PathLike = Union[str, "os.PathLike[str]"]
_SAFE = re.compile(r"[A-Za-z0-9_\-]")


class FeatureStoreError(ValueError):
    """A feature file that is missing, of another format, or holds unusable values."""


@dataclass(frozen=True)
class ImageFeatures:
    """The features of one image: ``regions`` (N, F) float32, ``boxes`` (N, 4) float32 or None."""

    regions: np.ndarray
    boxes: Optional[np.ndarray] = None


class FeatureStore(Protocol):
    """Read-only access to per-image features by key; a context manager."""

    feature_dim: int
    meta: dict

    def keys(self) -> list[str]: ...
    def __contains__(self, key: str) -> bool: ...
    def __len__(self) -> int: ...
    def get(self, key: str) -> ImageFeatures: ...
    def close(self) -> None: ...
    def __enter__(self) -> "FeatureStore": ...
    def __exit__(self, *exc) -> None: ...


def escape_key(key: str) -> str:
    """Key -> file/group name: letters, digits, ``_`` and ``-`` kept, all else ``%XX`` (UTF-8)."""
    if not isinstance(key, str) or key == "":
        raise FeatureStoreError(f"feature keys must be non-empty strings, found {key!r}; "
                                "use str(image_id)")
    return "".join(c if _SAFE.fullmatch(c) else "".join(f"%{b:02X}" for b in c.encode()) for c in key)


def unescape_key(name: str) -> str:
    """Inverse of :func:`escape_key`."""
    raw = re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), name.encode())
    return raw.decode()


def validate_features(key: str, regions, boxes, feature_dim: int) -> ImageFeatures:
    """Check one image's arrays; return them as float32. regions (N, F), boxes (N, 4) or None."""
    regions = np.asarray(regions)
    if regions.ndim != 2 or regions.shape[0] < 1 or regions.shape[1] != feature_dim:
        raise FeatureStoreError(f"image {key!r}: expected regions of shape (N>=1, {feature_dim}), "
                                f"found {regions.shape}; check the extractor's output width")
    if not np.issubdtype(regions.dtype, np.number) or np.issubdtype(regions.dtype, np.complexfloating):
        raise FeatureStoreError(f"image {key!r}: expected real numbers, found dtype {regions.dtype}")
    regions = regions.astype(np.float32, copy=False)
    if not np.isfinite(regions).all():
        raise FeatureStoreError(f"image {key!r}: regions hold {int((~np.isfinite(regions)).sum())} "
                                "NaN/inf values; fix the extraction (e.g. a division by zero) and rewrite it")
    if boxes is not None:
        boxes = np.asarray(boxes)
        if boxes.shape != (regions.shape[0], 4) or not np.issubdtype(boxes.dtype, np.number):
            raise FeatureStoreError(f"image {key!r}: expected boxes of shape ({regions.shape[0]}, 4) "
                                    f"(one x1,y1,x2,y2 per region), found {boxes.shape} {boxes.dtype}")
        boxes = boxes.astype(np.float32, copy=False)
        if not np.isfinite(boxes).all():
            raise FeatureStoreError(f"image {key!r}: boxes hold NaN/inf values")
    return ImageFeatures(regions, boxes)


def _check_dim(feature_dim) -> int:
    if isinstance(feature_dim, bool) or not isinstance(feature_dim, (int, np.integer)) or feature_dim < 1:
        raise FeatureStoreError(f"feature_dim must be a positive integer, found {feature_dim!r}")
    return int(feature_dim)


def _missing(key: str, path) -> KeyError:
    return KeyError(f"image {key!r} is not in the feature store {path}; "
                    "extract its features or drop it from the split")


class _StoreBase:
    feature_dim: int
    meta: dict
    path: Path

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.keys())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, feature_dim={self.feature_dim})"


class HDF5FeatureStore(_StoreBase):
    """Read-only HDF5 feature file (the default format). See the module docstring."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"feature file {self.path} does not exist; "
                                    "extract features first or fix the path")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as e:
            raise FeatureStoreError(f"{self.path} is not an HDF5 file ({e}); expected a catcap "
                                    f"feature file ({FORMAT})") from None
        try:
            self.feature_dim, self.meta = _read_header(self._file, self.path)
        except Exception:
            self._file.close()
            raise
        self._pid = os.getpid()

    @property
    def _images(self) -> "h5py.Group":
        """/images, reopened in a new process (forked or spawned DataLoader worker): HDF5
        handles must not cross processes."""
        if self._pid != os.getpid():
            self._file, self._pid = h5py.File(self.path, "r"), os.getpid()
        return self._file["images"]

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_file", "_pid")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _file=None, _pid=None)

    def keys(self) -> list[str]:
        return [unescape_key(n) for n in self._images.keys()]

    def __len__(self) -> int:
        return len(self._images)

    def __contains__(self, key: str) -> bool:
        return isinstance(key, str) and key != "" and escape_key(key) in self._images

    def get(self, key: str) -> ImageFeatures:
        """``ImageFeatures`` of one image; FeatureStoreError names the image if its values are bad."""
        if key not in self:
            raise _missing(key, self.path)
        group = self._images[escape_key(key)]
        boxes = group["boxes"][()] if "boxes" in group else None
        return validate_features(key, group["regions"][()], boxes, self.feature_dim)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _read_header(f: "h5py.File", path) -> tuple[int, dict]:
    found = f.attrs.get("format")
    found = found.decode() if isinstance(found, bytes) else found
    if found != FORMAT or "images" not in f:
        raise FeatureStoreError(f"{path} is an HDF5 file but not a catcap feature file: expected "
                                f"attribute format={FORMAT!r} and a group /images, found "
                                f"format={found!r}, top-level {sorted(f.keys())[:5]}; convert it with "
                                "HDF5FeatureWriter")
    return _check_dim(f.attrs.get("feature_dim")), json.loads(f.attrs.get("meta", "{}"))


class _WriterBase:
    """Shared ``.partial`` / resume logic; subclasses implement _open, _put, _keys, _close."""

    def __init__(self, path: PathLike, feature_dim: int, meta: Optional[dict] = None,
                 *, resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.feature_dim = _check_dim(feature_dim)
        self.meta = dict(meta or {})
        json.dumps(self.meta)  # fail now, not at close, if meta is not JSON
        if self.path.exists() and not (resume or overwrite):
            raise FileExistsError(f"{self.path} already exists; pass resume=True to append to it "
                                  "or overwrite=True to replace it")
        if self.partial.exists() and not (resume or overwrite):
            raise FileExistsError(f"{self.partial} is left from an interrupted run; pass resume=True "
                                  "to continue it or overwrite=True to start again")
        if resume and self.path.exists() and not self.partial.exists():
            os.replace(self.path, self.partial)
        elif not resume and self.partial.exists():
            _remove(self.partial)
        try:
            self._open(resume and self.partial.exists())
        except Exception:
            self._close()
            raise
        self._done = set(self._keys())

    def _check_header(self, feature_dim: int, meta: dict) -> None:
        if feature_dim != self.feature_dim:
            raise FeatureStoreError(f"cannot resume {self.partial}: it holds features of width "
                                    f"{feature_dim}, this writer was given {self.feature_dim}")
        if self.meta and meta != self.meta:
            raise FeatureStoreError(f"cannot resume {self.partial}: its meta {meta} differs from "
                                    f"{self.meta}; mixing encoders in one file is refused")
        self.meta = meta

    def written_keys(self) -> set[str]:
        """Keys already in the file (after ``resume=True``: what a restarted run can skip)."""
        return set(self._done)

    def write(self, key: str, regions, boxes=None) -> None:
        """Add one image: regions (N, F) with F == feature_dim, boxes (N, 4) or None."""
        name = escape_key(key)
        if key in self._done:
            raise FeatureStoreError(f"image {key!r} was already written to {self.partial}; keys "
                                    "must be unique (check written_keys() when resuming)")
        feats = validate_features(key, regions, boxes, self.feature_dim)
        self._put(name, feats)
        self._done.add(key)

    def close(self, commit: bool = True) -> None:
        """Finish the file; with ``commit`` rename ``.partial`` to the final path."""
        if self._close():
            if commit:
                if self.path.is_dir():  # os.replace cannot replace a non-empty directory
                    _remove(self.path)
                os.replace(self.partial, self.path)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(commit=exc_type is None)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class HDF5FeatureWriter(_WriterBase):
    """Write an HDF5 feature file atomically: ``with HDF5FeatureWriter(p, F, meta) as w: w.write(k, r)``."""

    flush_every = 200

    def _open(self, resume: bool) -> None:
        self._file = h5py.File(self.partial, "a" if resume else "w")
        if resume:
            dim, meta = _read_header(self._file, self.partial)
            self._check_header(dim, meta)
        else:
            self._file.attrs.update(format=FORMAT, feature_dim=self.feature_dim,
                                    meta=json.dumps(self.meta, sort_keys=True))
            self._file.create_group("images")
        self._images = self._file["images"]
        self._pending = 0

    def _keys(self) -> list[str]:
        return [unescape_key(n) for n in self._images.keys()]

    def _put(self, name: str, feats: ImageFeatures) -> None:
        group = self._images.create_group(name)
        group.create_dataset("regions", data=feats.regions)
        if feats.boxes is not None:
            group.create_dataset("boxes", data=feats.boxes)
        self._pending += 1
        if self._pending >= self.flush_every:  # bound what a killed process can lose
            self._file.flush()
            self._pending = 0

    def _close(self) -> bool:
        if getattr(self, "_file", None) is None or not self._file.id.valid:
            return False
        self._file.close()
        return True


class NpzDirFeatureStore(_StoreBase):
    """Read-only directory of ``<escaped key>.npz`` files plus ``meta.json``."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self.feature_dim, self.meta = _read_meta_json(self.path)

    def keys(self) -> list[str]:
        return sorted(unescape_key(p.name[:-4]) for p in self.path.glob("*.npz"))

    def __contains__(self, key: str) -> bool:
        return isinstance(key, str) and key != "" and (self.path / f"{escape_key(key)}.npz").is_file()

    def get(self, key: str) -> ImageFeatures:
        """``ImageFeatures`` of one image; FeatureStoreError names the image if its values are bad."""
        if key not in self:
            raise _missing(key, self.path)
        with np.load(self.path / f"{escape_key(key)}.npz", allow_pickle=False) as z:
            boxes = z["boxes"] if "boxes" in z.files else None
            return validate_features(key, z["regions"], boxes, self.feature_dim)

    def close(self) -> None:
        pass


def _read_meta_json(path: Path) -> tuple[int, dict]:
    if not (path / "meta.json").is_file():
        raise FeatureStoreError(f"{path} is not a catcap npz feature directory: expected "
                                f"{path / 'meta.json'}; write it with NpzDirFeatureWriter")
    head = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    if not isinstance(head, dict) or head.get("format") != NPZ_FORMAT:
        found = head.get("format") if isinstance(head, dict) else type(head).__name__
        raise FeatureStoreError(f"{path / 'meta.json'}: expected format {NPZ_FORMAT!r}, found {found!r}")
    return _check_dim(head.get("feature_dim")), dict(head.get("meta") or {})


class NpzDirFeatureWriter(_WriterBase):
    """Write an npz feature directory (``<dir>.partial`` renamed to ``<dir>`` on a clean close)."""

    def _open(self, resume: bool) -> None:
        if resume:
            self._check_header(*_read_meta_json(self.partial))
            for stale in self.partial.glob("*.tmp"):
                stale.unlink()
        else:
            self.partial.mkdir(parents=True)
            head = {"format": NPZ_FORMAT, "feature_dim": self.feature_dim, "meta": self.meta}
            _atomic_bytes(self.partial / "meta.json", json.dumps(head, indent=1, sort_keys=True).encode())
        self._open_flag = True

    def _keys(self) -> list[str]:
        return [unescape_key(p.name[:-4]) for p in self.partial.glob("*.npz")]

    def _put(self, name: str, feats: ImageFeatures) -> None:
        target = self.partial / f"{name}.npz"
        if target.exists():  # e.g. keys differing only in case on a case-insensitive disk
            raise FeatureStoreError(f"{target} already exists; two keys map to the same file")
        arrays = {"regions": feats.regions} if feats.boxes is None else \
            {"regions": feats.regions, "boxes": feats.boxes}
        tmp = target.with_name(target.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, target)

    def _close(self) -> bool:
        was_open, self._open_flag = getattr(self, "_open_flag", False), False
        return was_open


def _atomic_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def open_feature_store(path: PathLike) -> FeatureStore:
    """A directory -> :class:`NpzDirFeatureStore`; ``*.h5`` / ``*.hdf5`` -> :class:`HDF5FeatureStore`."""
    path = Path(path)
    if path.is_dir():
        return NpzDirFeatureStore(path)
    if path.suffix.lower() in (".h5", ".hdf5"):
        return HDF5FeatureStore(path)
    if not path.exists():
        raise FileNotFoundError(f"feature store {path} does not exist; expected an .h5/.hdf5 file "
                                "or an npz feature directory")
    raise FeatureStoreError(f"cannot open {path} as a feature store: supported are HDF5 files "
                            "(*.h5, *.hdf5) and npz directories (a folder with meta.json)")


def check_features(store: FeatureStore, keys: Iterable[str], feature_dim: Optional[int] = None,
                   *, config_key: str = "model.feature_dim") -> None:
    """Up-front checks before a long run: every key present, and the store's width expected.

    Does not read every array: NaN/inf are refused at write time and by ``store.get()`` per
    image, so a full value scan here would cost a pass over the whole file for nothing.
    """
    if feature_dim is not None and store.feature_dim != feature_dim:
        raise FeatureStoreError(f"the feature store has width {store.feature_dim}, the model "
                                f"expects {feature_dim}; set {config_key}={store.feature_dim} "
                                "or point at features from the matching encoder")
    keys = [str(k) for k in keys]
    missing = [k for k in keys if k not in store]
    if missing:
        raise FeatureStoreError(f"{len(missing)} of {len(keys)} images have no features in "
                                f"{getattr(store, 'path', store)} (first: {missing[:5]}); extract "
                                "them, or check that keys are str(image_id)")
