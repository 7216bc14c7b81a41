"""Shared pieces of the feature stores: types, key escaping, value checks, base classes.

See :mod:`catcap.data.features` for the formats and the public API.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol, Union

import numpy as np

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
