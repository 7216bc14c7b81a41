"""Extract grid features of many images into an HDF5 feature store.

Decoding and preprocessing run in ``workers`` DataLoader worker processes, overlapped with batched
inference under ``torch.inference_mode()`` in the main process; every finished batch is written at
once (streaming, through :class:`~catcap.data.features.HDF5FeatureWriter`, which builds
``<out>.partial`` and renames it on a clean finish). A rerun with ``resume=True`` (the default)
skips every key already in the file, so an interrupted run continues where it stopped.

An image that cannot be read (corrupt, truncated, not an image) is skipped, never aborting the
run: it is returned in ``ExtractResult.errors`` and listed in ``<out>.errors.txt``.

Per image: ``regions`` = the encoder's grid cells (H*W, C) float32, row-major; ``boxes`` = each
cell's box ``x1, y1, x2, y2`` in pixels of the original image (so attention can be drawn on it).
The store's ``meta`` records the encoder, input size, grid and preprocessing, and ``keys``: how
images are keyed (``"file-stem"``: the file name without extension; ``"image-id"``: the dataset's
image id, from :func:`dataset_images`). Continuing a store made another way is refused, so one
file never holds an image twice under two keys (stores written before ``keys`` was recorded
are continued as before).
"""

from __future__ import annotations

import numbers
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Union

import torch
from PIL import Image

from catcap import faults
from catcap.atomic import write_text_atomic
from catcap.features.efficientnet import ImageEncoder, _spec, preprocess_image
from catcap.features.onnx_backend import make_encoder
from catcap.progress import progress_bar
from catcap.sharding import Shard, part_path

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff")
PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class ExtractResult:
    """What a run did: ``extracted`` new images, ``skipped`` (already in the file), ``errors``
    [(path, message)] of unreadable images, wall ``seconds``, ``out`` the feature file (a
    shard's part), ``merged`` what rank 0's automatic merge did (else None)."""

    out: Path
    encoder: str
    backend: str = "torch"
    extracted: int = 0
    skipped: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    merged: Optional[object] = None  # the catcap.merge.MergeResult of a sharded run's automatic merge

    @property
    def images_per_second(self) -> float:
        return self.extracted / self.seconds if self.seconds > 0 else 0.0


def list_images(images: Union[PathLike, Sequence[PathLike]]) -> list[Path]:
    """A folder (its image files, not recursive, sorted by name) or a list of paths -> paths."""
    if isinstance(images, (str, os.PathLike)):
        folder = Path(images)
        if not folder.is_dir():
            raise FileNotFoundError(f"image folder {folder} does not exist (or is not a folder); "
                                    "pass a folder of images or a list of image paths")
        found = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        if not found:
            raise ValueError(f"found no images in {folder}: expected files ending in "
                             f"{', '.join(IMAGE_SUFFIXES)}; check the folder")
        return found
    return [Path(p) for p in images]


class DatasetKeys(dict):
    """``{str(path): str(image_id)}`` from :func:`dataset_images`; recorded as ``keys="image-id"``."""

    key_scheme = "image-id"


def dataset_images(dataset: PathLike, images_dir: PathLike) -> tuple[list[Path], dict[str, str]]:
    """The images of a Karpathy-format dataset JSON, found in ``images_dir``, and their store keys.

    Returns (paths, {str(path): key}) with key = ``str(image_id)``, the key ``catcap train`` looks
    up (:attr:`~catcap.data.karpathy.ImageRecord.key`). A file is looked for at
    ``images_dir/filepath/filename`` and then ``images_dir/filename``; if any is missing, nothing
    runs and the error names the missing files.
    """
    from catcap.data.karpathy import load_karpathy

    folder = Path(images_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"image folder {folder} does not exist (or is not a folder); pass --images DIR")
    paths, keys, missing = [], DatasetKeys(), []
    for records in load_karpathy(dataset, restval_as_train=False).values():
        for rec in records:
            candidates = [folder / str(rec.extra.get("filepath") or "") / rec.filename, folder / rec.filename]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                missing.append(rec.filename)
                continue
            paths.append(found)
            keys[str(found)] = rec.key
    if missing:
        raise FileNotFoundError(f"{_count(len(missing), 'image')} of {dataset} {'is' if len(missing) == 1 else 'are'} "
                                f"not in {folder} (e.g. {', '.join(missing[:3])}); "
                                "expected every listed file there (or under its 'filepath'); check --images")
    return paths, keys


class ImageFiles(torch.utils.data.Dataset):
    """(index, pixels (3, S, S) or None, width, height, error) per path: an image file read,
    decoded and preprocessed as the encoder expects; an unreadable one gives its error instead.
    Runs in DataLoader worker processes (with :func:`reader_worker_init`); shared by
    ``catcap extract`` and the caption pipeline (:mod:`catcap.inference.pipeline`)."""

    def __init__(self, paths: list[Path], input_size: int):
        self.paths, self.input_size = paths, input_size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        try:
            with Image.open(self.paths[i]) as image:
                image.load()  # decode now: a truncated or corrupt file fails here, in the worker
                return i, preprocess_image(image, self.input_size), image.width, image.height, None
        except Exception as err:  # noqa: BLE001 (any unreadable file is reported, not fatal)
            return i, None, 0, 0, f"{type(err).__name__}: {err}"


def _collate(items):
    good = [it for it in items if it[4] is None]
    batch = torch.stack([it[1] for it in good]) if good else None
    return batch, [(it[0], it[2], it[3]) for it in good], [(it[0], it[4]) for it in items if it[4] is not None]


def reader_worker_init(_: int) -> None:
    """A reading worker process runs one torch thread: it must not compete with inference for cores."""
    torch.set_num_threads(1)


def extract_features(
    images: Union[PathLike, Sequence[PathLike]],
    out: PathLike,
    encoder: Union[str, ImageEncoder] = "efficientnet-lite0",
    *,
    backend: str = "torch",
    batch_size: int = 32,
    workers: int = 2,
    resume: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    keys: Optional[Mapping[str, str]] = None,
    key_scheme: Optional[str] = None,
    limit: Optional[int] = None,
    shard: Optional[Shard] = None,
    log: Optional[Callable[[str], None]] = None,
) -> ExtractResult:
    """Extract grid features of ``images`` (a folder or a list of paths) into the HDF5 file ``out``.

    ``keys`` maps an image path (as given) to its store key; by default the key is the file stem
    (``1000268201_693b08cb0e.jpg`` -> ``1000268201_693b08cb0e``). ``key_scheme`` is recorded in
    the store's meta as ``keys`` (default: ``"file-stem"`` without ``keys``, ``"image-id"`` for
    the mapping of :func:`dataset_images`, else ``"custom"``); continuing a store recorded with
    another scheme is refused. ``limit`` (>= 1) keeps the first N images (in the order given:
    by name for a folder). ``backend`` ``torch`` (eager PyTorch) or ``onnx`` (ONNX Runtime,
    several times faster on a CPU; same features to ~3e-5, see :mod:`catcap.features.onnx_backend`);
    ignored when ``encoder`` is an encoder object. ``resume`` (default) appends to an existing
    ``out`` and skips its keys; with ``resume=False`` an existing ``out`` is an error unless
    ``overwrite``. If not a single image can be read and ``out`` held none before, nothing is
    written and ValueError says why (the unreadable files are listed in ``<out>.errors.txt``).

    ``shard`` (a :class:`~catcap.sharding.Shard` other than the whole job) takes its contiguous
    block of the selected images (after ``keys``/``limit``, in the same order) and writes the part
    :func:`~catcap.sharding.part_path` of ``out`` (a normal resumable store; join the parts with
    :func:`catcap.merge.merge`). Images already in a finished ``out`` are skipped when resuming, so
    a sharded run only adds what ``out`` lacks; a shard whose images are all unreadable writes an
    empty part (the merge decides whether anything was read at all).
    """
    t0 = time.perf_counter()
    out = Path(out)
    _check_arguments(out, encoder, backend, batch_size, workers, limit)
    paths = list_images(images)
    if limit is not None:
        paths = paths[:limit]
    names = [(keys[str(p)] if keys is not None else p.stem) for p in paths]
    _check_unique(paths, names)
    shard = shard or Shard()
    paths, names, target = shard.take(paths), shard.take(names), out
    out = part_path(out, shard)
    skip = _finished_keys(target) if resume and not shard.whole else set()
    if key_scheme is None:
        key_scheme = "file-stem" if keys is None else getattr(keys, "key_scheme", "custom")

    enc = make_encoder(encoder, backend) if isinstance(encoder, str) else encoder
    result = ExtractResult(out=out, encoder=enc.name, backend=backend if isinstance(encoder, str) else "given")
    out.parent.mkdir(parents=True, exist_ok=True)
    _run(enc, paths, names, out, dict(enc.meta, keys=key_scheme), result, resume=resume, overwrite=overwrite,
         batch_size=batch_size, workers=workers, progress=progress, log=log, skip=skip, part=not shard.whole)
    result.seconds = time.perf_counter() - t0
    if log and result.errors:
        verb = "was" if len(result.errors) == 1 else "were"
        log(f"{_count(len(result.errors), 'image')} could not be read and {verb} skipped; listed in {_errors_path(out)}")
    return result


def _check_arguments(out: Path, encoder, backend: str, batch_size: int, workers: int, limit) -> None:
    """Refuse bad arguments before any file is touched."""
    if out.suffix.lower() not in (".h5", ".hdf5"):
        raise ValueError(f"expected an HDF5 output path ending in .h5 or .hdf5, found {out}; "
                         "e.g. --out feats.h5")
    if batch_size < 1 or workers < 0:
        raise ValueError(f"expected batch_size >= 1 and workers >= 0, found {batch_size}, {workers}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1):
        raise ValueError(f"expected limit (--limit) to be a number of images >= 1, found {limit!r}; "
                         "leave it out to extract every image")
    if isinstance(encoder, str):
        _spec(encoder)  # an unknown name or backend fails before any file is touched
        if backend not in ("torch", "onnx"):
            raise ValueError(f"unknown backend {backend!r}: expected 'torch' or 'onnx' (e.g. --backend onnx)")


def _check_unique(paths: list[Path], names: list[str]) -> None:
    seen: dict[str, Path] = {}
    for p, k in zip(paths, names):
        if k in seen:
            raise ValueError(f"two images map to the key {k!r}: {seen[k]} and {p}; keys must be unique "
                             "(rename one, or pass keys= with a mapping path -> key)")
        seen[k] = p


def _finished_keys(out: Path) -> set[str]:
    """Keys of the finished store ``out`` (a sharded run's target), or none when there is none."""
    from catcap.data.features import open_feature_store

    if not out.is_file():
        return set()
    with open_feature_store(out) as store:
        return set(store.keys())


def _run(enc, paths: list[Path], names: list[str], out: Path, meta: dict, result: ExtractResult, *,
         resume: bool, overwrite: bool, batch_size: int, workers: int, progress: bool, log,
         skip: frozenset | set = frozenset(), part: bool = False) -> None:
    """Open the writer, skip what is done (in it or in ``skip``), extract the rest into it; fills
    ``result``. A shard's ``part`` is kept even when none of its images could be read."""
    from catcap.data.features import HDF5FeatureWriter

    with HDF5FeatureWriter(out, enc.channels, meta, resume=resume, overwrite=overwrite) as writer:
        done = writer.written_keys() | set(skip)
        todo = [i for i, k in enumerate(names) if k not in done]
        result.skipped = len(paths) - len(todo)
        if not todo:
            if log:
                log(f"nothing to do: all {_count(len(paths), 'image')} already in {out}")
        else:
            if log and result.skipped:
                log(f"{result.skipped} of {len(paths)} images already in {out}; extracting the other {len(todo)}")
            _extract_into(writer, enc, [paths[i] for i in todo], [names[i] for i in todo], result,
                          batch_size=batch_size, workers=workers, progress=progress)
        _write_errors(out, result.errors)
        if todo and not result.extracted and not done and not part:
            writer.discard_if_empty()
            raise ValueError(_nothing_extracted(out, result.errors))


def _extract_into(writer, enc, paths: list[Path], names: list[str], result: ExtractResult, *,
                  batch_size: int, workers: int, progress: bool) -> None:
    """Decode ``paths`` in ``workers`` processes, encode them in batches, write each batch at once."""
    loader = torch.utils.data.DataLoader(
        ImageFiles(paths, enc.input_size), batch_size=batch_size,
        num_workers=workers, collate_fn=_collate, worker_init_fn=reader_worker_init if workers else None,
        prefetch_factor=4 if workers else None)
    bar = _progress(len(paths), enabled=progress)
    try:
        with torch.inference_mode():
            for batch, ok, bad in loader:
                for j, message in bad:
                    result.errors.append((str(paths[j]), message))
                if batch is not None:
                    grid, _ = enc(batch)
                    grid = grid.float().numpy()
                    for row, (j, width, height) in enumerate(ok):
                        writer.write(names[j], grid[row], enc.boxes(width, height))
                    result.extracted += len(ok)
                    faults.point("extract.after_batch")
                if bad:
                    bar.set_postfix(errors=len(result.errors), refresh=False)
                bar.update(len(ok) + len(bad))
    finally:
        bar.close()


def _nothing_extracted(out: Path, errors: list[tuple[str, str]]) -> str:
    path, message = errors[0]
    n = len(errors)
    which = "the only image could not be read" if n == 1 else f"none of the {n} images could be read"
    return (f"{which}, so nothing was written to {out} (first: {path}: {message}; "
            f"all are listed in {_errors_path(out)}); expected image files PIL can open: check --images")


def _count(n: int, word: str) -> str:
    """``1 image``, ``2 images``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _progress(total: int, *, enabled: bool):
    return progress_bar(total=total, unit="img", desc="extract", enabled=enabled)


def _errors_path(out: Path) -> Path:
    return out.with_name(out.name + ".errors.txt")


def _write_errors(out: Path, errors: list[tuple[str, str]]) -> None:
    """``<out>.errors.txt``: one ``path<TAB>message`` line per unreadable image of this run
    (removed when the run had none, so a stale list never outlives its fix)."""
    path = _errors_path(out)
    if not errors:
        if path.exists():
            path.unlink()
        return
    write_text_atomic(path, "".join(f"{p}\t{' '.join(m.split())}\n" for p, m in errors))


def read_errors(out: PathLike) -> list[tuple[str, str]]:
    """The ``(path, message)`` list of ``<out>.errors.txt`` ([] when there is none)."""
    path = _errors_path(Path(out))
    if not path.exists():
        return []
    return [tuple(line.split("\t", 1)) for line in path.read_text(encoding="utf-8").splitlines() if line]
