"""``catcap caption`` end to end: the model and the items (:func:`prepare`), then the captions
through the pipeline of :mod:`catcap.inference.pipeline`, to a list, a stream or a resumable JSON Lines
file (:func:`caption_to_file`, format in :mod:`catcap.inference.caption_file`).

See docs/pipeline.md for the design (stages, queues, threads, resume) and its measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from catcap.atomic import sha256_file
from catcap.inference.pipeline import Caption, caption_batches
from catcap.progress import progress_bar

PROGRESS_FROM = 32  # a bar for more images than this (a handful of photos captions without one)


@dataclass
class CaptionJob:
    """A loaded captioner (or ensemble) and what it captions: ``items`` (as given, folders
    expanded), ``is_file[i]`` (read from pixels, else a key of ``store``), ``generation`` (a
    :class:`~catcap.decoding.GenerationConfig`); ``settings`` identify the results (recorded in
    a partial output); ``image_ids[i]``: the id the results record for item i (None: unknown)."""

    cap: object
    items: list[str]
    is_file: list[bool]
    store: object = None
    generation: object = None
    settings: dict = field(default_factory=dict)
    image_ids: list = field(default_factory=list)

    def batches(self, start: int = 0, *, batch_size: int = 16, workers: int = 2, pipelined: bool = True,
                threads: Optional[int] = None) -> Iterator[list[Caption]]:
        """Captions of ``items[start:]``, one list per batch, in input order, each with its image
        id (see :func:`catcap.inference.pipeline.caption_batches`)."""
        ids = iter(self.image_ids[start:] if self.image_ids else [])
        for batch in caption_batches(self.cap, self.items[start:], self.is_file[start:], store=self.store,
                                     generation=self.generation, batch_size=batch_size,
                                     workers=workers, pipelined=pipelined, threads=threads):
            yield [replace(c, image_id=next(ids, None)) for c in batch]

    def close(self) -> None:
        if self.store is not None and hasattr(self.store, "close"):
            self.store.close()


def prepare(checkpoint, items: Sequence[str], *, features: Optional[str] = None, generation=None,
            device: str = "auto", zoo=None, take: Optional[Callable[[list], list]] = None, refs=None) -> CaptionJob:
    """Load the captioner (several checkpoints: an ensemble) and check the items before anything
    runs (see ``catcap.api.caption``). ``generation``: a :class:`~catcap.decoding.GenerationConfig`
    (None: its defaults). ``take``: keeps a part of the expanded items (a shard's block);
    ``refs``: a reference file whose file names give the photos' image ids
    (:mod:`catcap.metrics.result_ids`)."""
    from catcap import zoo as model_zoo
    from catcap.decoding import GenerationConfig
    from catcap.inference.ensemble import load_captioner

    generation = generation or GenerationConfig()
    items = expand_image_folders(items)
    if checkpoint is None:
        checkpoint = model_zoo.default_model(zoo).path
    sources = [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
    folders = [model_zoo.locate(c, zoo) for c in sources]
    cap = load_captioner(folders, device=device, zoo=zoo)
    from_pixels = cap.reads_pixels and features is None
    check_caption_items(items, must_exist=from_pixels,
                        keys_from=None if not from_pixels else cap.data_file("features"))
    if take is not None:
        items = take(items)
    is_file = [from_pixels and Path(i).is_file() for i in items]
    store = _open_store(cap, features, [i for i, f in zip(items, is_file) if not f])
    shas = [weights_sha256(f) for f in folders]
    settings = {"model_sha256": shas[0] if len(shas) == 1 else shas, "beam": generation.num_beams,
                "max_len": generation.max_length,
                "features": None if all(is_file) else str(features or cap.data_file("features"))}
    # other settings only when changed: partial outputs made with the defaults (no such keys) still continue
    settings.update({k: v for k, v in generation.changed().items() if k not in ("num_beams", "max_length")})
    if refs is not None:  # the ids the rows record come from it
        settings["refs"] = str(refs)
    return CaptionJob(cap, items, is_file, store, generation, settings, caption_image_ids(items, is_file, refs))


def caption_image_ids(items: Sequence[str], is_file: Sequence[bool], refs=None) -> list:
    """The image id of each item: a photo's from ``refs``' file names, else from its file name
    (:class:`catcap.metrics.result_ids.ImageIds`); a feature-store key's is the key."""
    from catcap.metrics.files import read_json
    from catcap.metrics.result_ids import ImageIds, id_from_key

    ids = ImageIds.from_references(read_json(refs, "references"), str(refs)) if refs is not None else ImageIds()
    return [ids.of(item) if file else id_from_key(Path(item).stem) for item, file in zip(items, is_file)]


def _open_store(cap, features: Optional[str], keys_of: list[str]):
    """The feature store for the items that are keys (None when there are none), checked."""
    if not keys_of:
        return None
    from catcap.data.features import check_features, open_feature_store

    store = cap.reading(open_feature_store(features or cap.data_file("features")))
    check_features(store, [Path(item).stem for item in keys_of], cap.config.model.input_dim)
    return store


def weights_sha256(folder) -> Optional[str]:
    """sha256 of ``folder/model.safetensors`` (the model's identity in a partial output)."""
    path = Path(folder) / "model.safetensors"
    return sha256_file(path) if path.is_file() else None


def expand_image_folders(items: Sequence[str]) -> list[str]:
    """Each folder among ``items`` replaced by its image files (by suffix, sorted by name; not
    recursive); a folder without any is an error naming it. Other items stay as they are."""
    from catcap.features.extract import IMAGE_SUFFIXES

    out = []
    for item in items:
        path = Path(item)
        if not path.is_dir():
            out.append(str(item))
            continue
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if not found:
            raise ValueError(f"{item} is a folder with no image files ({', '.join(IMAGE_SUFFIXES)}); pass image "
                             "files, a folder of them, or feature-store keys")
        out.extend(str(p) for p in found)
    return out


def check_caption_items(items: Sequence[str], must_exist: bool, keys_from: Optional[str] = None) -> None:
    """With ``must_exist`` (a model that reads pixels), an item that looks like an image path (an
    image suffix or a folder part) must be an existing file (folders are expanded before); any
    other item that is no file must be a key of the feature store ``keys_from``, so without that
    file it is named as the missing photo or folder it most likely is (``catcap caption photo5``)."""
    from catcap.features.extract import IMAGE_SUFFIXES

    if not items:
        raise ValueError("expected at least one image file or feature-store key, got none")
    keys = []
    for item in items:
        path = Path(item)
        looks_like_file = path.suffix.lower() in IMAGE_SUFFIXES or len(path.parts) > 1
        if must_exist and looks_like_file and not path.is_file():
            raise FileNotFoundError(f"image file not found: {item}; check the path (the name is case-sensitive)")
        if must_exist and not path.exists() and keys_from is not None:
            keys.append(item)
    unknown = _not_in_store(keys, keys_from) if keys else []
    if unknown:
        where = f", nor an image {Path(unknown[0]).stem!r} in {keys_from}" if Path(keys_from).exists() else ""
        raise FileNotFoundError(f"no photo or folder named {unknown[0]!r} in {Path.cwd()}{where}; pass image files "
                                "or folders of them (check the name: it is case-sensitive), or feature-store keys "
                                "with --features STORE")


def _not_in_store(items: Sequence[str], store_path) -> list[str]:
    """The items whose stem is not a key of the feature store ``store_path`` (all of them when
    there is no such file)."""
    from catcap.data.features import open_feature_store

    if not Path(store_path).exists():
        return list(items)
    with open_feature_store(store_path) as store:
        return [item for item in items if Path(item).stem not in store]


def _bar(total: int, done: int, progress: bool):
    return progress_bar(total=total, initial=done, unit="img", desc="caption",
                        enabled=progress and total - done > PROGRESS_FROM)


def caption_stream(job: CaptionJob, *, progress: bool = True, **run) -> Iterator[Caption]:
    """Every item's :class:`Caption`, in input order, as batches finish; a bar in images/s on
    stderr for more than a handful of images. ``run``: batch_size, workers, pipelined, threads."""
    bar, errors = _bar(len(job.items), 0, progress), 0
    try:
        for batch in job.batches(**run):
            yield from batch
            errors = _count(bar, batch, errors)
    finally:
        bar.close()


def _count(bar, batch: list[Caption], errors: int) -> int:
    """Advance ``bar`` by one batch; returns the unreadable images so far (shown on the bar)."""
    new = sum(c.error is not None for c in batch)
    if new:
        bar.set_postfix(errors=errors + new, refresh=False)
    bar.update(len(batch))
    return errors + new


@dataclass
class FileResult:
    """What :func:`caption_to_file` did: ``out`` written (None when already complete, or when not
    one image could be read: then ``errors`` lists them all),
    ``done_before`` results kept from a partial, ``captioned`` now, ``errors`` unreadable."""

    out: Optional[Path]
    done_before: int = 0
    captioned: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)


def caption_to_file(job: CaptionJob, out, *, restart: bool = False, batch_size: int = 16, progress: bool = True,
                    log: Callable[[str], None] = lambda _: None, **run) -> FileResult:
    """Write ``job``'s captions to the JSON Lines file ``out`` (:mod:`catcap.inference.caption_file`):
    incrementally to ``out.partial``, continued after an interruption, renamed into place at
    the end. An existing ``out`` is left alone (returns ``out=None``) unless ``restart``."""
    from catcap.inference.caption_file import CaptionFile, count_lines

    out = Path(out)
    if out.exists() and not restart:
        log(f"{out} is already complete ({count_lines(out)} captions); nothing to do (--restart captions again)")
        return FileResult(None)
    settings = dict(job.settings, batch_size=batch_size)
    writer = CaptionFile(out, settings)
    done = writer.open(job.items, batch_size, restart=restart)
    result = FileResult(out, done_before=done)
    if done:
        log(f"continuing {writer.partial}: {done} of {len(job.items)} images done, captioning the other "
            f"{len(job.items) - done}")
    bar = _bar(len(job.items), done, progress)
    try:
        for batch in job.batches(done, batch_size=batch_size, **run):
            writer.append(c.to_json() for c in batch)
            result.captioned += len(batch)
            result.errors += [(c.image, c.error) for c in batch if c.error is not None]
            _count(bar, batch, len(result.errors) - sum(c.error is not None for c in batch))
    finally:
        bar.close()
        writer.close()
    if result.captioned and len(result.errors) == result.captioned and not done:
        writer.discard()  # not one image could be read: no file of errors only (a finished out stays as it was)
        result.out = None
        return result
    writer.finish()
    return result

