"""The features ``catcap evaluate --checkpoint`` reads: the checkpoint's own feature store, or,
with ``--images DIR``, the split's photos run through the checkpoint's image encoder into a
store in catcap's cache (extracted once; a later run reads it, and an interrupted extraction
continues).

A zoo model (``flickr8k-m2``) records the encoder and preprocessing that made its training
features, so its validation score comes back from the photos themselves::

    catcap evaluate --checkpoint flickr8k-m2 --images ../shared/data/flickr8k/images \\
        --refs data/flickr8k/dataset_flickr8k.json --split val --beam 3

The cached store is ``<cache>/photo-features/<encoder>-<backend>-<digest>.h5`` (``<cache>``:
:func:`catcap.cache.cache_root`), one per encoder, encoder backend, photo folder and reference
file (the digest is of the last two's absolute paths), keyed by image id as ``catcap extract
--dataset`` keys them. The backend is ONNX Runtime when it is installed (the bundled models'
features were extracted with it), else PyTorch; the two agree to ~3e-5.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shlex
from pathlib import Path
from typing import Callable, Optional


def feature_store(cap, dataset: str, split: str, *, features: Optional[str] = None, images: Optional[str] = None,
                  progress: bool = True, log: Optional[Callable[[str], None]] = None) -> str:
    """The feature store to caption ``split`` of ``dataset`` from: ``features`` when given, the
    split's photos in ``images`` (extracted into the cache, :func:`photo_store`), else the
    checkpoint's own store; a missing store is an error naming the command that makes it."""
    if features and images:
        raise ValueError("give --features STORE (features you extracted) or --images DIR (photos, extracted with the "
                         "checkpoint's encoder into catcap's cache), not both")
    if images:
        return str(photo_store(cap, dataset, split, images, progress=progress, log=log))
    store = features or cap.data_file("features")
    if not Path(store).exists():
        raise FileNotFoundError(missing_store_message(cap, store, dataset, split, given=bool(features)))
    return store


def missing_store_message(cap, store: str, dataset: str, split: str, *, given: bool) -> str:
    """What to do when the feature store is not there: the extract command, or --images."""
    encoder = cap.features_meta.get("encoder")
    whose = "" if given else " (the checkpoint's data.features)"
    if not cap.reads_pixels:
        return (f"feature file {store}{whose} does not exist; this model reads features not made by a catcap image "
                "encoder, so make them as its training features were made, or pass --features STORE")
    extract = shlex.join(["catcap", "extract", "--encoder", encoder, "--images", "IMAGES_DIR", "--dataset",
                          str(dataset), "--out", str(store)])
    return (f"feature file {store}{whose} does not exist; pass --images IMAGES_DIR (the folder of the photos of "
            f"{dataset}) to caption the {split} split from its photos with the checkpoint's encoder ({encoder}; "
            f"extracted once into catcap's cache), or make the store first: {extract}")


def encoder_backend() -> str:
    """ONNX Runtime when installed, else PyTorch (``catcap extract --backend``)."""
    return "onnx" if importlib.util.find_spec("onnxruntime") is not None else "torch"


def cache_path(encoder: str, backend: str, images: str | Path, dataset: str | Path) -> Path:
    """Where the photos of ``images`` (numbered by ``dataset``) are cached for ``encoder``."""
    from catcap.cache import cache_root

    digest = hashlib.sha256(f"{Path(images).resolve()}\n{Path(dataset).resolve()}".encode()).hexdigest()[:16]
    return cache_root() / "photo-features" / f"{encoder}-{backend}-{digest}.h5"


def split_photos(dataset: str | Path, split: str, images: str | Path) -> dict[str, str]:
    """{photo path: store key (image id)} of the split's photos, found as ``catcap extract
    --dataset`` finds them (``DIR/filepath/filename``, then ``DIR/filename``); an error naming
    the missing files."""
    from catcap.data.karpathy import load_karpathy
    from catcap.features.extract import DatasetKeys

    folder = Path(images)
    if not folder.is_dir():
        raise FileNotFoundError(f"--images {folder}: no such folder; expected the folder of the photos that "
                                f"{dataset} lists")
    keys, missing = DatasetKeys(), []
    for rec in load_karpathy(dataset, [split])[split]:
        candidates = [folder / str(rec.extra.get("filepath") or "") / rec.filename, folder / rec.filename]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            missing.append(rec.filename)
        else:
            keys[str(found)] = rec.key
    if missing:
        raise FileNotFoundError(f"{len(missing)} photo(s) of the {split} split of {dataset} are not in {folder} (e.g. "
                                f"{', '.join(missing[:3])}); expected every listed file there (or under its "
                                "'filepath'): check --images")
    return keys


def photo_store(cap, dataset: str | Path, split: str, images: str | Path, *, progress: bool = True,
                log: Optional[Callable[[str], None]] = None) -> Path:
    """The cached store holding the split's photos as the checkpoint's encoder sees them;
    extracts the ones it lacks (resumable, :func:`catcap.features.extract.extract_features`)."""
    from catcap.features.extract import extract_features
    from catcap.inference.captioner import pixel_encoder
    from catcap.threads import photo_readers

    try:
        pixel_encoder(cap.features_meta, cap.device)  # a model that cannot read photos says so here
    except ValueError as err:
        raise ValueError(f"--images {images}: {err}; or give --features STORE in place of --images") from None
    encoder, backend = cap.features_meta["encoder"], encoder_backend()
    keys = split_photos(dataset, split, images)
    out = cache_path(encoder, backend, images, dataset)
    if log:
        log(f"features of the {len(keys)} {split} photos in {images} ({encoder} on {backend}, the checkpoint's "
            f"encoder): {out}")
    if _holds(out, keys.values()):
        if log:
            log("all of them are in the cache already")
        return out
    workers = photo_readers()  # JPEG readers, as catcap caption's default
    result = extract_features([Path(p) for p in keys], out, encoder, backend=backend, keys=keys, workers=workers,
                              progress=progress, log=log)
    if result.errors:  # the scores are of the whole split: a photo missing from it is not scored around
        path, why = result.errors[0]
        raise ValueError(f"--images {images}: {len(result.errors)} of the {len(keys)} {split} photos could not be "
                         f"read (first: {path}: {why}); expected every photo of the split, as the scores are of the "
                         "whole split: replace or fix them and run again (the photos read are kept in the cache)")
    return out


def _holds(store: Path, keys) -> bool:
    """Whether the finished store ``store`` has every key (read only: the file is not touched)."""
    from catcap.data.features import open_feature_store

    if not store.is_file():
        return False
    with open_feature_store(store) as features:
        return set(keys) <= set(features.keys())
