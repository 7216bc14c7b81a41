"""Shared pieces of the feature stores: types, key escaping, value checks, base classes.

See :mod:`catcap.data.features` for the formats and the public API.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol, Union

import numpy as np

from catcap import faults

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


def content_sha256(feats: ImageFeatures) -> str:
    """sha256 of one image's float32 regions (and boxes) as stored: written with each image of an
    HDF5 store and checked when the image is read (a bit flip is refused, never trained on)."""
    digest = hashlib.sha256(np.ascontiguousarray(feats.regions, dtype=np.float32).tobytes())
    if feats.boxes is not None:
        digest.update(np.ascontiguousarray(feats.boxes, dtype=np.float32).tobytes())
    return digest.hexdigest()


def _check_dim(feature_dim) -> int:
    if isinstance(feature_dim, bool) or not isinstance(feature_dim, (int, np.integer)) or feature_dim < 1:
        raise FeatureStoreError(f"feature_dim must be a positive integer, found {feature_dim!r}")
    return int(feature_dim)


def read_header(source, feature_dim, meta, dim_key: str, meta_key: str) -> tuple[int, dict]:
    """(feature_dim, meta) of a store's header, checked the same way for every format: the width
    a positive integer, the meta a JSON object (``meta`` as stored: JSON text, bytes or an object).
    A FeatureStoreError names the file and the key (``dim_key``/``meta_key``) and says what was
    expected and found; a wrong type is reported as that, before any image is read."""
    damaged = "the feature store's header is damaged: extract, import or copy it again"
    if isinstance(feature_dim, bool) or not isinstance(feature_dim, (int, np.integer)) or feature_dim < 1:
        raise FeatureStoreError(f"{source}: {dim_key}: expected a positive integer (the width of the features), "
                                f"found {type(feature_dim).__name__} {_short(feature_dim)}; {damaged}")
    if isinstance(meta, bytes):
        meta = meta.decode("utf-8", errors="replace")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as err:
            raise FeatureStoreError(f"{source}: {meta_key}: expected JSON text, found {_short(meta)} "
                                    f"({err.msg} at column {err.colno}); {damaged}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise FeatureStoreError(f"{source}: {meta_key}: expected a JSON object (the encoder, the keys, ...), found "
                                f"{type(meta).__name__} {_short(meta)}; {damaged}")
    return int(feature_dim), meta


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


REPLACE_ADVICE = "use --restart to replace it (overwrite=True in Python), or choose another --out"

# meta fields that newer writers record: compared only when both the store and the writer have one,
# so a store written before the field existed (or a writer that does not set it) is not refused
_ADDED_LATER = ("keys",)

KEY_SCHEMES = {
    "file-stem": "file name (1000268201_693b08cb0e)",
    "image-id": "image id (--dataset; 1000268201)",
    "custom": "a caller's own keys= mapping",
}


def meta_conflict(found: dict, wanted: dict) -> Optional[str]:
    """Why features made as ``wanted`` must not be added to a store made as ``found`` (None: they may).

    A short sentence naming what differs (the encoder, the key scheme, else up to three fields),
    not two full dict dumps. A field of :data:`_ADDED_LATER` missing from either is no conflict.
    """
    fields = sorted(k for k in set(found) | set(wanted) if found.get(k) != wanted.get(k)
                    and not (k in _ADDED_LATER and (k not in found or k not in wanted)))
    if not fields:
        return None
    if "encoder" in fields:
        return (f"it holds features of encoder {found.get('encoder')!r}, this run uses "
                f"{wanted.get('encoder')!r}; mixing encoders in one file is refused")
    if "keys" in fields:
        have, want = (KEY_SCHEMES.get(m.get("keys"), repr(m.get("keys"))) for m in (found, wanted))
        return (f"its images are keyed by {have}, this run keys them by {want}; continuing would "
                "store every image a second time under the other key")
    shown = "; ".join(f"{k} = {_short(found.get(k))} in the file, {_short(wanted.get(k))} now"
                      for k in fields[:3])
    more = f" (and {len(fields) - 3} more)" if len(fields) > 3 else ""
    return f"its features were made with other settings ({shown}{more}); mixing them in one file is refused"


def _short(value, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


class _WriterBase:
    """Shared ``.partial`` / resume logic; subclasses implement _open, _put, _keys, _close.

    Resuming a finished file moves it to ``.partial`` while it is written; whatever happens
    (refused, unreadable, an exception while writing) it gets its name back when the writer
    closes, so a finished store is never stranded at ``.partial``.
    """

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
        self._restore = False  # True while a finished file is moved aside to .partial
        if resume and self.path.exists() and not self.partial.exists():
            os.replace(self.path, self.partial)
            self._restore = True
        elif not resume and self.partial.exists():
            _remove(self.partial)
        self._source = self.path if self._restore else self.partial  # the name errors should give
        fresh = not (resume and self.partial.exists())
        try:
            self._open(not fresh)
            self._done = set(self._keys())
        except BaseException:
            try:
                self._close()
            finally:
                self._put_back()
                if fresh and self.partial.exists():  # a new file that failed to start (a full disk) holds nothing
                    _remove(self.partial)
            raise

    def _check_header(self, feature_dim: int, meta: dict) -> None:
        if feature_dim != self.feature_dim:
            raise FeatureStoreError(f"cannot resume {self._source}: it holds features of width "
                                    f"{feature_dim}, this writer was given {self.feature_dim}; "
                                    f"{REPLACE_ADVICE}")
        conflict = meta_conflict(meta, self.meta) if self.meta else None
        if conflict:
            raise FeatureStoreError(f"cannot resume {self._source}: {conflict}; {REPLACE_ADVICE}")
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
        faults.point("features.after_image")

    def close(self, commit: bool = True) -> None:
        """Finish the file; with ``commit`` rename ``.partial`` to the final path.

        Without ``commit`` a new file stays at ``.partial`` (a rerun with ``resume=True``
        continues it), but a resumed finished file always gets its name back: it holds its
        old images plus every image completely written since.
        """
        if self._close():
            if commit or self._restore:
                faults.point("features.before_commit")
                if self.path.is_dir():  # os.replace cannot replace a non-empty directory
                    _remove(self.path)
                os.replace(self.partial, self.path)
                self._restore = False

    def discard_if_empty(self) -> None:
        """Close without finishing; a ``.partial`` that holds no image is deleted rather than
        left behind (a resumed finished file still gets its name back, unchanged)."""
        delete = not self._done and not self._restore
        self.close(commit=False)
        if delete:
            _remove(self.partial)

    def _put_back(self) -> None:
        if self._restore:
            os.replace(self.partial, self.path)
            self._restore = False

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(commit=exc_type is None)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
