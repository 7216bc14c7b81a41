"""The course's captioning data: reading its files, minibatches, decoding word ids.

Layout of the data folder (``mml.paths.data_dir()``; written by ``python -m mml.build_data``)::

    coco2014_captions.h5          train_captions (Nc, L) int32, train_image_idxs (Nc,) int32,
                                  val_captions, val_image_idxs  (word ids, <NULL>-padded)
    train2014_vgg16_fc7_pca.h5    features (Ni, 512) float32   (pca_features=True)
    train2014_vgg16_fc7.h5        features (Ni, F) float32     (pca_features=False)
    val2014_vgg16_fc7_pca.h5, val2014_vgg16_fc7.h5
    coco2014_vocab.json           {"idx_to_word": [...], "word_to_idx": {...}};
                                  <NULL>=0, <START>=1, <END>=2, <UNK>=3
    train2014_urls.txt, val2014_urls.txt   one image URL or local path per line (image order)

A caption row is ``<START> w_1 .. w_k <END> <NULL> ..``; ``*_image_idxs[i]`` is the row of the
caption's image in the features and URL lists. Relative URL lines are paths under the data
folder and are returned as absolute paths.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Union

import h5py
import numpy as np

from mml.paths import data_dir

__all__ = ["CAPTIONS_FILE", "SPECIAL_WORDS", "VOCAB_FILE", "decode_captions", "features_file",
           "load_coco_data", "sample_coco_minibatch", "urls_file"]

CAPTIONS_FILE = "coco2014_captions.h5"
VOCAB_FILE = "coco2014_vocab.json"
SPLITS = ("train", "val")
#: The special words at their fixed ids: <NULL>=0, <START>=1, <END>=2, <UNK>=3.
SPECIAL_WORDS = ("<NULL>", "<START>", "<END>", "<UNK>")


def features_file(split: str, pca: bool) -> str:
    """File name of a split's image features, e.g. ``train2014_vgg16_fc7_pca.h5``."""
    return f"{split}2014_vgg16_fc7{'_pca' if pca else ''}.h5"


def urls_file(split: str) -> str:
    """File name of a split's image URLs, e.g. ``val2014_urls.txt``."""
    return f"{split}2014_urls.txt"


def load_coco_data(base_dir: Union[str, os.PathLike, None] = None, max_train: Optional[int] = None,
                   pca_features: bool = True) -> dict:
    """All of the data folder as a dict of arrays (see the module docstring for the keys).

    ``max_train``: keep that many training captions drawn at random, with replacement, with
    NumPy's global RNG (as the course did). ``base_dir`` defaults to ``mml.paths.data_dir()``.
    """
    base = Path(base_dir) if base_dir is not None else data_dir()
    print("base dir ", base)
    _check_folder(base, pca_features)
    data = _read_h5(base / CAPTIONS_FILE)
    for split in SPLITS:
        data[f"{split}_features"] = _read_h5(base / features_file(split, pca_features))["features"]
    vocab = json.loads((base / VOCAB_FILE).read_text(encoding="utf-8"))
    data["idx_to_word"], data["word_to_idx"] = vocab["idx_to_word"], vocab["word_to_idx"]
    for split in SPLITS:
        data[f"{split}_urls"] = _read_urls(base, urls_file(split))
    if max_train is not None:
        _subsample_train(data, max_train)
    return data


def sample_coco_minibatch(data: dict, batch_size: int = 100, split: str = "train"):
    """(captions (B, L) int32, features (B, F) float32, urls (B,)) of ``batch_size`` random
    captions of ``split``, drawn with replacement from NumPy's global RNG."""
    if f"{split}_captions" not in data:
        raise ValueError(f"no split {split!r} in data; expected one of {list(SPLITS)}")
    pick = np.random.choice(data[f"{split}_captions"].shape[0], batch_size)
    captions = data[f"{split}_captions"][pick]
    image_idxs = data[f"{split}_image_idxs"][pick]
    return captions, data[f"{split}_features"][image_idxs], data[f"{split}_urls"][image_idxs]


def decode_captions(captions, idx_to_word):
    """Word ids (T,) -> one string, (N, T) -> list of N strings.

    Words up to and including ``<END>``, ``<NULL>`` left out (``<START>`` is kept, as in the
    course's output).
    """
    captions = np.asarray(captions)
    if captions.ndim not in (1, 2):
        raise ValueError(f"expected word ids of shape (T,) or (N, T), found {captions.shape}")
    rows = [_decode_row(row, idx_to_word) for row in np.atleast_2d(captions)]
    return rows[0] if captions.ndim == 1 else rows


def _decode_row(row, idx_to_word) -> str:
    words = []
    for index in row:
        word = idx_to_word[int(index)]
        if word != "<NULL>":
            words.append(word)
        if word == "<END>":
            break
    return " ".join(words)


def _check_folder(base: Path, pca: bool) -> None:
    names = [CAPTIONS_FILE, VOCAB_FILE] + [features_file(s, pca) for s in SPLITS] + [urls_file(s) for s in SPLITS]
    missing = [n for n in names if not (base / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"the captioning data folder {base} lacks {missing}; build it with "
            f"`python -m mml.build_data --out {base}` (the built-in shapes world), or point "
            "MML_DATA_DIR at a folder with the course's files (see docs/teaching.md)")


def _read_h5(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {name: np.asarray(f[name]) for name in f.keys()}


def _read_urls(base: Path, name: str) -> np.ndarray:
    lines = (base / name).read_text(encoding="utf-8").splitlines()
    return np.asarray([_resolve(base, line.strip()) for line in lines])


def _resolve(base: Path, url: str) -> str:
    """A relative local path becomes absolute under ``base``; URLs and absolute paths stay."""
    if "://" in url or os.path.isabs(url) or not url:
        return url
    return str(base / url)


def _subsample_train(data: dict, max_train: int) -> None:
    if isinstance(max_train, bool) or not isinstance(max_train, int) or max_train < 1:
        raise ValueError(f"max_train must be a positive integer or None, found {max_train!r}")
    pick = np.random.randint(data["train_captions"].shape[0], size=max_train)
    data["train_captions"] = data["train_captions"][pick]
    data["train_image_idxs"] = data["train_image_idxs"][pick]
