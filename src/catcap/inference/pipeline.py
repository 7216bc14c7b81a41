"""Captioning a folder of photos as a pipeline: read, encode and decode overlap.

``catcap caption DIR`` on thousands of photos runs three stages at once, joined by bounded
queues, so memory stays flat in the number of photos (nothing holds all images or all
features)::

    stage 1  read + decode + preprocess JPEGs   DataLoader worker processes (``workers``),
                                                 at most ``2 * workers`` batches prefetched
    stage 2  image encoder (batch k+1)          a background thread, feeding a queue of
                                                 at most ``QUEUE_BATCHES`` encoded batches
    stage 3  caption decoding (batch k)         the calling thread, yielding each batch

PyTorch's kernels release the GIL, so the encoder thread and the decoding thread really run
at the same time. Threads: with ``threads=T`` (default ``torch.get_num_threads()``) the
decoding thread takes ``T // 2`` intra-op threads and the encoder thread the other
``T - T // 2`` (each at least 1; OpenMP's count is per calling thread, MKL's is
process-wide); the JPEG workers run one thread each. Without ``pipelined`` the same batches
go through the same code one after the other in the calling thread (the reference path: the
captions are the same strings in the same order, tested).

Items are image files (read from their pixels through the checkpoint's image encoder) or
feature-store keys (their rows read from ``store`` in the encoder thread). Batches are cut from
the items in input order, ``batch_size`` at a time, so results come out in input order. An
unreadable image does not stop the run: its :class:`Caption` has ``caption=None`` and
``error`` says why (as ``catcap extract`` reports them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import queue
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from catcap.features.extract import ImageFiles, reader_worker_init

QUEUE_BATCHES = 2  # encoded batches waiting for the decoder: batch k+1 encodes while batch k decodes


def _libc_trim():
    """glibc's ``malloc_trim`` (None elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _libc_trim()


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim(0)``; nothing
    elsewhere). Called after every batch: without it the two threads' freed activations
    fragment glibc's heap and the peak resident memory creeps up with the number of photos
    (+16% from 1,000 to 7,000, benchmarks/results/pipeline.md)."""
    if _TRIM is not None:
        _TRIM(0)


@dataclass(frozen=True)
class Caption:
    """One result: ``image`` as given, its ``caption``, or ``caption=None`` and ``error``;
    ``image_id``: the id the reference file knows it by (:mod:`catcap.metrics.result_ids`), or None."""

    image: str
    caption: Optional[str]
    error: Optional[str] = None
    image_id: object = None

    def to_json(self) -> dict:
        """``{"image", "image_id", "caption"}`` (no ``image_id`` when unknown; + ``"error"`` for an
        unreadable image): one JSON Lines row, which catcap evaluate, compare, report and
        human-eval read as it is."""
        row = {"image": self.image} | ({} if self.image_id is None else {"image_id": self.image_id})
        row["caption"] = self.caption
        if self.error is not None:
            row["error"] = self.error
        return row


@dataclass
class EncodedBatch:
    """Stage 2's output for items ``[start, start + len(items))``: ``features[j]`` the (N_j, F)
    rows the model reads, or None with ``errors[j]`` for an unreadable image."""

    start: int
    items: list[str]
    features: list[Optional[np.ndarray]]
    errors: list[Optional[str]]


class _Items(torch.utils.data.Dataset):
    """Stage 1 (in the worker processes): per item ``(index, pixels (3, S, S) or None, error)``;
    a feature-store key (``is_file[i]`` False) passes through as ``(index, None, None)``."""

    def __init__(self, items: Sequence[str], is_file: Sequence[bool], input_size: int):
        self.files = ImageFiles([Path(i) for i in items], input_size)
        self.is_file = list(is_file)

    def __len__(self) -> int:
        return len(self.is_file)

    def __getitem__(self, i: int):
        if not self.is_file[i]:
            return i, None, None
        index, pixels, _, _, error = self.files[i]
        return index, pixels, error


def _keep(items: list) -> list:
    """The DataLoader's collate: the batch's items as they are (a list, in order)."""
    return items


def read_batches(items: Sequence[str], is_file: Sequence[bool], input_size: int, *, batch_size: int,
                 workers: int) -> Iterator[list[tuple[int, Optional[torch.Tensor], Optional[str]]]]:
    """Stage 1: batches of ``(index, pixels (3, S, S) or None, error or None)`` in item order,
    decoded in ``workers`` processes (0: in the calling thread)."""
    loader = torch.utils.data.DataLoader(
        _Items(items, is_file, input_size), batch_size=batch_size, num_workers=workers, collate_fn=_keep,
        worker_init_fn=reader_worker_init if workers else None, prefetch_factor=2 if workers else None)
    yield from loader


class Stages:
    """Stages 2 and 3 for one captioner (or ensemble): ``encode`` a read batch, ``decode`` an
    encoded one as ``generation`` (a :class:`~catcap.decoding.GenerationConfig`; None: its defaults) says."""

    def __init__(self, cap, *, store=None, generation=None):
        self.cap, self.store, self.generation = cap, store, generation

    @torch.inference_mode()
    def encode(self, items: Sequence[str], batch) -> EncodedBatch:
        """Read batch (from :func:`read_batches`) -> the model's feature rows per item: pixels
        through the image encoder as one (B, 3, S, S) batch, keys from the store."""
        from catcap.inference.captioner import grid_features

        start = batch[0][0]
        feats: list[Optional[np.ndarray]] = [None] * len(batch)
        errors = [error for _, _, error in batch]
        photos = [j for j, (_, pixels, _) in enumerate(batch) if pixels is not None]
        if photos:
            pixels = torch.stack([batch[j][1] for j in photos])
            for j, rows in zip(photos, grid_features(self.cap.image_encoder, pixels, self.cap.device,
                                                     self.cap.config.model)):
                feats[j] = rows
        for j, (i, pixels, error) in enumerate(batch):
            if pixels is None and error is None:
                feats[j] = self.store.get(Path(items[i]).stem).regions
        return EncodedBatch(start, [items[i] for i, _, _ in batch], feats, errors)

    def decode(self, batch: EncodedBatch) -> list[Caption]:
        """Encoded batch -> one :class:`Caption` per item, in order (the readable ones decoded
        as one batch)."""
        good = [j for j, f in enumerate(batch.features) if f is not None]
        texts = self.cap.generate([batch.features[j] for j in good], config=self.generation) if good else []
        by_index = dict(zip(good, texts))
        return [Caption(item, by_index.get(j), batch.errors[j]) for j, item in enumerate(batch.items)]


def thread_shares(threads: int) -> tuple[int, int]:
    """``threads`` -> (encoder's, decoder's) intra-op threads when both run at once."""
    decoder = max(1, threads // 2)
    return max(1, threads - decoder), decoder


def in_background(produce: Callable[[], Iterator], *, maxsize: int = QUEUE_BATCHES,
                  threads: Optional[int] = None) -> Iterator:
    """Run the iterator ``produce()`` in a daemon thread (with ``threads`` intra-op threads)
    and yield its items through a queue of at most ``maxsize``; an exception in the thread is
    raised here; closing this generator early stops the thread at its next item."""
    q: queue.Queue = queue.Queue(maxsize=maxsize)
    stop = threading.Event()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        if threads:
            torch.set_num_threads(threads)
        items = produce()
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((done, None))
        except BaseException as err:  # noqa: BLE001 (handed to the consumer, raised there)
            put((done, err))
        finally:
            if hasattr(items, "close"):  # e.g. the DataLoader's worker processes stop now, not at garbage collection
                items.close()

    worker = threading.Thread(target=run, name="catcap-encoder", daemon=True)
    worker.start()
    try:
        while True:
            item, err = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        stop.set()
        worker.join(timeout=10)


def caption_batches(cap, items: Sequence[str], is_file: Sequence[bool], *, store=None, generation=None,
                    batch_size: int = 16, workers: int = 2, pipelined: bool = True,
                    threads: Optional[int] = None) -> Iterator[list[Caption]]:
    """Caption ``items`` (``is_file[i]``: an image file to read, else a key of ``store``) in
    batches of ``batch_size``, decoded as ``generation`` says (a
    :class:`~catcap.decoding.GenerationConfig`); yields each batch's :class:`Caption` list in input order.

    ``pipelined`` (default): stages 1-3 overlap (module doc); else one after the other in
    this thread (and JPEGs read here, not in worker processes)."""
    if batch_size < 1 or workers < 0:
        raise ValueError(f"expected batch_size >= 1 and workers >= 0, found {batch_size}, {workers}")
    if len(items) != len(is_file):
        raise ValueError(f"expected one is_file flag per item, found {len(is_file)} for {len(items)} items")
    if not items:
        return
    if len(items) <= batch_size:
        workers = 0  # one batch: starting worker processes would cost more than they save
    stages = Stages(cap, store=store, generation=generation)
    input_size = cap.image_encoder.input_size if any(is_file) else 0

    def encoded() -> Iterator[EncodedBatch]:
        for batch in read_batches(items, is_file, input_size, batch_size=batch_size,
                                  workers=workers if pipelined else 0):
            yield stages.encode(items, batch)

    if not pipelined:
        for batch in encoded():
            yield stages.decode(batch)
        return
    total = threads or torch.get_num_threads()
    enc_threads, dec_threads = thread_shares(total)
    torch.set_num_threads(dec_threads)
    try:
        for batch in in_background(encoded, threads=enc_threads):
            captions = stages.decode(batch)
            release_free_memory()
            yield captions
    finally:
        torch.set_num_threads(total)
