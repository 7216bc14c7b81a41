"""Feature stores: per-image region (or grid) features, read by key.

Two on-disk formats share one reading protocol, :class:`FeatureStore`:

* HDF5 (the default), one file: attrs ``format="catcap-features-v1"``, ``feature_dim``,
  ``meta`` (a JSON string); one group ``/images/<key>`` per image holding the dataset
  ``regions`` (N, F) float32 and optionally ``boxes`` (N, 4) float32.
* npz directory: ``meta.json`` (format, feature_dim, meta) and one ``<key>.npz`` per image
  holding ``regions`` and optionally ``boxes`` (read with ``allow_pickle=False``).

Keys are strings (``str(image_id)`` for COCO); on disk a key is written through
:func:`escape_key` (``%XX`` escapes, reversible), so ``/``, spaces or dots are fine.
Legend: N regions of one image, F feature width; boxes are ``x1, y1, x2, y2`` in pixels of the
original image (the built-in world, `catcap extract` and the importers all write pixel boxes;
the store's ``meta`` says which image size they refer to where known).

Writers build ``<path>.partial`` and rename it to ``<path>`` on a clean close, so a crash
never leaves a half-written ``<path>``. ``resume=True`` reopens the ``.partial`` (or the
finished file, which is moved to ``.partial`` while it is written and always gets its name
back when the writer closes: refused, unreadable or interrupted by an exception) and appends;
``written_keys()`` says what to skip. Resuming a store whose width or ``meta`` differs (another
encoder, preprocessing or key scheme, e.g. ``meta["keys"]`` = ``"file-stem"`` vs ``"image-id"``
from ``catcap extract``) is refused; a store written before a ``meta`` field existed is not
refused for lacking it. Values (shape, width, NaN/inf) are checked when written
and again, per image, by ``get()``; :func:`check_features` does the cheap up-front checks
(missing keys, width) and deliberately does not read every array.
"""

from __future__ import annotations

from pathlib import Path
from itertools import islice
from typing import Iterable, Optional

from catcap.data.feature_base import (  # noqa: F401  (re-exported)
    FeatureStore, PathLike, FeatureStoreError, ImageFeatures, escape_key, unescape_key, validate_features)
from catcap.data.features_hdf5 import FORMAT, HDF5FeatureStore, HDF5FeatureWriter  # noqa: F401
from catcap.data.features_npz import NPZ_FORMAT, NpzDirFeatureStore, NpzDirFeatureWriter  # noqa: F401

__all__ = [
    "CHECKPOINT_WIDTH_ADVICE", "FORMAT", "NPZ_FORMAT", "FeatureStore", "FeatureStoreError", "HDF5FeatureStore",
    "HDF5FeatureWriter", "ImageFeatures", "NpzDirFeatureStore", "NpzDirFeatureWriter",
    "check_features", "escape_key", "open_feature_store", "unescape_key", "validate_features",
]


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


# width-mismatch advice for a trained checkpoint (caption, analyze): its width cannot be changed
CHECKPOINT_WIDTH_ADVICE = ("a trained checkpoint reads only features of the width it was trained on: pass "
                           "(--features) the store it was trained on, or one made by the same encoder")


def check_features(store: FeatureStore, keys: Iterable[str], feature_dim: Optional[int] = None,
                   *, config_key: str = "model.feature_dim", width_advice: Optional[str] = None) -> None:
    """Up-front checks before a long run: every key present, and the store's width expected.

    ``width_advice`` is what a width mismatch tells the user to do; the default suits training
    (``set model.feature_dim=<store width> or ...``); for a trained checkpoint (caption, analyze)
    pass :data:`CHECKPOINT_WIDTH_ADVICE`, since a checkpoint's width cannot be changed.

    Does not read every array: NaN/inf are refused at write time and by ``store.get()`` per
    image, so a full value scan here would cost a pass over the whole file for nothing.
    """
    if feature_dim is not None and store.feature_dim != feature_dim:
        if width_advice is None:
            width_advice = (f"set {config_key}={store.feature_dim} or point at features from the "
                            "matching encoder")
        raise FeatureStoreError(f"the feature store has width {store.feature_dim}, the model "
                                f"expects {feature_dim}; {width_advice}")
    keys = [str(k) for k in keys]
    missing = [k for k in keys if k not in store]
    if missing:
        held = list(islice(store.keys(), 3))
        holds = _describe_keys(held, len(store))
        raise FeatureStoreError(f"{len(missing)} of {len(keys)} images have no features in "
                                f"{getattr(store, 'path', store)} (first: {missing[:5]}); {holds}; "
                                f"{_key_advice(held, missing, getattr(store, 'meta', {}) or {})}")


def _describe_keys(held: list[str], total: int) -> str:
    if not held:
        return "the store is empty"
    more = ", ..." if total > len(held) else ""
    return f"the store holds {total} keys like [{', '.join(map(repr, held))}{more}]"


def _looks_like_id(key: str) -> bool:
    return key.isdigit()


def _key_advice(held: list[str], missing: list[str], meta: dict) -> str:
    """What to do about missing keys, from how the store's and the wanted keys look."""
    sample = missing[:20]
    store_stems = meta.get("keys") == "file-stem" or (held and not any(map(_looks_like_id, held)))
    store_ids = meta.get("keys") == "image-id" or (held and all(map(_looks_like_id, held)))
    if store_stems and all(map(_looks_like_id, sample)):
        return ("the store is keyed by file name but image ids are wanted: re-extract it with "
                "catcap extract --images DIR --dataset JSON --out NEW.h5 (keys images by id)")
    if store_ids and not any(map(_looks_like_id, sample)):
        return ("the store is keyed by image id (catcap extract --dataset) but these keys look like "
                "file names: look images up by image id, or extract without --dataset")
    return "extract them, or check that keys are str(image_id)"
