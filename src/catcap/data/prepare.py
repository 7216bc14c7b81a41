"""``prepare_dataset``: a Karpathy-format dataset -> vocabulary, encoded captions, CIDEr-D df, summary.

Writes into ``out_dir``:

* ``vocab.json`` -- :class:`catcap.data.vocab.Vocab` of the train split's words seen at least
  ``min_count`` times (the vocabulary ``catcap train`` builds itself with the same settings);
* ``captions.npz`` -- the train split's captions encoded with that vocabulary (plain arrays,
  loadable with ``np.load(..., allow_pickle=False)``):

  - ``ids`` (N, max_len + 2) int32: ``<bos> w1..wk <eos>`` then ``<pad>`` (0), k = min(words, max_len);
  - ``lengths`` (N,) int32: k + 2, the number of non-pad ids;
  - ``num_words`` (N,) int32: the caption's words before truncation;
  - ``image_keys`` (N,) str: the feature-store key of the caption's image (``str(image_id)``);
  - ``image_ids`` (N,) int64: the same as integers (present when every image id is an integer);
  - ``caption_index`` (N,) int32: the caption's position among its image's captions;
  - ``format`` (``"catcap.captions"``), ``version`` (1), ``max_len``;

* ``prepare.json`` -- a summary: images and captions per split, vocabulary size, the share of
  train tokens the vocabulary covers, captions truncated, caption length statistics, paths.

and the CIDEr-D document frequencies of the train split's references
(:class:`catcap.metrics.docfreq.DocumentFrequency`) **next to the dataset JSON**, under the name
``catcap.training.reward.cached_document_frequency`` looks for
(``<dataset stem>.<split>.<fingerprint>.cider-df.npz``), so self-critical training finds the
table instead of rebuilding it. When that folder is not writable the table goes to ``out_dir``
(copy it to a run's ``out_dir`` to have training find it there).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from catcap.atomic import write_text_atomic
from catcap.data.karpathy import ImageRecord, KarpathyFormatError, load_karpathy
from catcap.data.vocab import Vocab
from catcap.metrics.docfreq import DocumentFrequency, write_npz_atomic

__all__ = ["PrepareError", "prepare_dataset", "df_cache_name", "references_fingerprint", "load_captions",
           "CAPTIONS_FORMAT"]

CAPTIONS_FORMAT, CAPTIONS_VERSION = "catcap.captions", 1


class PrepareError(ValueError):
    """A dataset or setting ``prepare_dataset`` cannot work with."""


def references_fingerprint(references: Sequence[Sequence[Sequence[str]]]) -> str:
    """The hash of tokenised references that names the df cache file (used by ``prepare`` and
    by self-critical training's :func:`catcap.training.reward.cached_document_frequency`)."""
    h = hashlib.sha256()
    for image in references:
        for caption in image:
            h.update(" ".join(caption).encode("utf-8"))
            h.update(b"\n")
        h.update(b"\x00")
    return h.hexdigest()[:12]


def df_cache_name(dataset: str | Path, split: str, references) -> str:
    """``<dataset stem>.<split>.<fingerprint>.cider-df.npz``: the df cache file's name."""
    return f"{Path(dataset).stem}.{split}.{references_fingerprint(references)}.cider-df.npz"


def prepare_dataset(karpathy_json: str | Path, out_dir: str | Path, min_count: int = 5, max_len: int = 16,
                    train_split: str = "train", log=None) -> dict[str, Any]:
    """Prepare a dataset for training (see the module docstring); returns the ``prepare.json`` summary."""
    start = time.perf_counter()
    for name, value, low in (("min_count", min_count, 1), ("max_len", max_len, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise PrepareError(f"{name} must be an integer >= {low}, found {value!r}")
    karpathy_json = Path(karpathy_json)
    if not karpathy_json.is_file():
        raise PrepareError(f"dataset file not found: {karpathy_json}; expected a Karpathy-format JSON such as "
                           f"the one `catcap import flickr8k ... --out dataset_flickr8k.json` writes")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise PrepareError(f"--out {out_dir} is a file; expected a folder (new or existing) for vocab.json, "
                           f"captions.npz and prepare.json")
    try:
        splits = load_karpathy(karpathy_json)
    except KarpathyFormatError as err:
        raise PrepareError(str(err)) from None
    if train_split not in splits:
        have = ", ".join(f"{s} ({len(r)} images)" for s, r in sorted(splits.items())) or "no images"
        raise PrepareError(f"{karpathy_json}: no images in the train split {train_split!r}; the file has {have}; "
                           f"pick one with train_split / --train-split")
    _check_captions(splits, karpathy_json)
    train = splits[train_split]

    vocab = Vocab.build((c for r in train for c in r.captions), min_count=min_count)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab.to_json(out_dir / "vocab.json")
    arrays, stats = _encode(train, vocab, max_len)
    write_npz_atomic(out_dir / "captions.npz", arrays)

    refs = [r.captions for r in train]
    name = df_cache_name(karpathy_json, train_split, refs)
    df_path = karpathy_json.parent / name
    note = "next to the dataset JSON, where catcap train looks for it"
    if not df_path.exists():
        df = DocumentFrequency.from_references([[list(c) for c in image] for image in refs])
        if not os.access(karpathy_json.parent, os.W_OK):
            df_path = out_dir / name
            note = (f"{karpathy_json.parent} is not writable; copy it into a run's out_dir (or next to the "
                    f"dataset JSON) for catcap train to find it")
        df.save(df_path)
    elif log:
        log(f"[catcap] CIDEr-D document frequencies already present: {df_path}")

    words = stats.pop("_words")
    summary = {
        "dataset": str(karpathy_json),
        "train_split": train_split, "min_count": min_count, "max_len": max_len,
        "splits": {s: {"images": len(r), "captions": sum(len(x.captions) for x in r)} for s, r in sorted(splits.items())},
        "vocab_size": len(vocab), "vocab_words": len(vocab) - 4,
        "train_distinct_words": stats.pop("distinct"),
        "train_tokens": int(words.sum()),
        "train_token_coverage": stats.pop("coverage"),
        "train_captions_truncated": stats.pop("truncated"),
        "train_captions_truncated_pct": round(100.0 * stats["truncated_frac"], 3),
        "train_caption_length": _length_stats(words),
        "files": {"vocab": str(out_dir / "vocab.json"), "captions": str(out_dir / "captions.npz"),
                  "cider_df": str(df_path), "cider_df_note": note},
        "seconds": round(time.perf_counter() - start, 2),
    }
    write_text_atomic(out_dir / "prepare.json", _json(summary))
    return summary


def load_captions(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a ``captions.npz`` written by :func:`prepare_dataset` (no pickle is loaded)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as err:
        raise PrepareError(f"{path}: not a readable captions file ({err}); expected captions.npz from catcap prepare") from None
    if str(arrays.get("format")) != CAPTIONS_FORMAT:
        raise PrepareError(f"{path}: expected format {CAPTIONS_FORMAT!r}, found {arrays.get('format')!r}; "
                           f"write it with catcap prepare")
    return arrays


def _check_captions(splits: dict[str, list[ImageRecord]], source: Path) -> None:
    """Images without captions and captions without words would fail training later: fail now."""
    problems = []
    for split, records in sorted(splits.items()):
        for r in records:
            if not r.captions:
                problems.append(f"image {r.key} ({r.filename}, {split}) has no caption")
            for j, c in enumerate(r.captions):
                if not c:
                    problems.append(f"image {r.key} ({r.filename}, {split}) caption {j} {r.raw[j]!r} has no word")
    if problems:
        shown = "; ".join(problems[:5]) + (f" ... and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise PrepareError(f"{source}: expected every image to have captions with at least one word, found "
                           f"{len(problems)} problem(s): {shown}; remove them (catcap import leaves such "
                           f"images and captions out by itself)")


def _encode(train: list[ImageRecord], vocab: Vocab, max_len: int) -> tuple[dict[str, np.ndarray], dict]:
    rows = [(r, j, c) for r in train for j, c in enumerate(r.captions)]
    ids = np.full((len(rows), max_len + 2), vocab.pad_id, dtype=np.int32)
    lengths = np.zeros(len(rows), np.int32)
    words = np.zeros(len(rows), np.int32)
    known = total = 0
    distinct: set[str] = set()
    for i, (_, _, c) in enumerate(rows):
        enc = vocab.encode(c, max_len=max_len)
        ids[i, : len(enc)] = enc
        lengths[i], words[i] = len(enc), len(c)
        total += len(c)
        known += sum(1 for w in c if w in vocab)
        distinct.update(c)
    arrays = {"format": np.array(CAPTIONS_FORMAT), "version": np.array(CAPTIONS_VERSION), "max_len": np.array(max_len),
              "ids": ids, "lengths": lengths, "num_words": words,
              "image_keys": np.array([r.key for r, _, _ in rows], dtype=str),
              "caption_index": np.array([j for _, j, _ in rows], np.int32)}
    if all(isinstance(r.image_id, int) for r in train):
        arrays["image_ids"] = np.array([r.image_id for r, _, _ in rows], np.int64)
    truncated = int((words > max_len).sum())
    return arrays, {"_words": words, "distinct": len(distinct), "coverage": round(known / max(total, 1), 6),
                    "truncated": truncated, "truncated_frac": truncated / max(len(rows), 1)}


def _length_stats(words: np.ndarray) -> dict:
    if len(words) == 0:
        return {}
    return {"min": int(words.min()), "mean": round(float(words.mean()), 3), "median": round(float(np.median(words)), 3),
            "p95": round(float(np.percentile(words, 95)), 3), "max": int(words.max())}


def _json(data) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
