"""Write the course's data folder (see :mod:`mml.coco_utils`) from catcap data.

    python -m mml.build_data                        # shapes world, 3000 train / 250 val images
    python -m mml.build_data --out DIR --train 200 --val 40 --feature-dim 1024
    python -m mml.build_data --karpathy dataset_flickr8k.json --features flickr8k.h5 \\
                             --images Flicker8k_Dataset            # Flickr8k features, PCA 512

Without ``--out`` the folder is ``mml.paths.data_dir()`` (``$MML_DATA_DIR`` or the user cache).
Any Karpathy split file with a catcap feature store works (the shapes world is written as
one). Per image, the region/grid features are averaged to one vector (the "fc7" file) and
PCA-reduced to ``--pca-dim`` (the "_pca" file, fitted on the training images). The test split
is not used (the course has train and val only). Images are copied into ``images/`` and the
URL files hold their relative paths. The folder is built beside the target and renamed into
place at the end; ``info.json`` records the source and counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import h5py
import numpy as np

from catcap.data.features import open_feature_store
from catcap.folders import building_folder
from catcap.data.karpathy import ImageRecord, load_karpathy
from catcap.data.vocab import Vocab
from mml.coco_utils import CAPTIONS_FILE, SPECIAL_WORDS, SPLITS, VOCAB_FILE, features_file, urls_file
from mml.paths import data_dir

__all__ = ["build_from_karpathy", "build_shapes", "main", "pca_fit"]


def build_shapes(out_dir=None, *, num_train: int = 3000, num_val: int = 250, seed: int = 0,
                 feature_dim: int = 2048, pca_dim: int = 512, max_words: int = 15,
                 overwrite: bool = False, progress: bool = True) -> Path:
    """Generate a shapes world (:func:`catcap.data.synthetic.make_world`) and build from it."""
    from catcap.data.synthetic import make_world

    out_dir = Path(out_dir) if out_dir is not None else data_dir()
    _check_target(out_dir, overwrite)  # before the world is made, not after
    with tempfile.TemporaryDirectory(prefix="mml-shapes-") as tmp:
        world = make_world(Path(tmp) / "world", num_train=num_train, num_val=num_val, num_test=0,
                           seed=seed, feature_dim=feature_dim, progress=progress)
        return build_from_karpathy(world.dataset, world.features, out_dir, image_root=world.root,
                                   pca_dim=pca_dim, max_words=max_words, overwrite=overwrite,
                                   source={"kind": "shapes", "seed": seed, "feature_dim": feature_dim})


def build_from_karpathy(dataset, features, out_dir=None, *, image_root=None, pca_dim: int = 512,
                        max_words: int = 15, min_count: int = 1, overwrite: bool = False,
                        source: Optional[dict] = None) -> Path:
    """Build the folder from a Karpathy split file and a catcap feature store; returns it.

    Captions with more than ``max_words`` words are left out (the course's rows hold
    ``<START>`` + 15 words + ``<END>``); the vocabulary is the training words seen at least
    ``min_count`` times, other words become ``<UNK>``.
    """
    out = Path(out_dir) if out_dir is not None else data_dir()
    _check_target(out, overwrite)
    records = load_karpathy(dataset, splits=SPLITS)
    vocab = Vocab.build((c for r in records["train"] for c in r.captions), min_count=min_count)
    words = list(SPECIAL_WORDS) + vocab.tokens[len(SPECIAL_WORDS):]
    root = Path(image_root) if image_root is not None else Path(dataset).parent
    with building_folder(out) as tmp:
        info = _write_folder(tmp, records, vocab, words, features, root, pca_dim, max_words)
        info["source"] = source or {"kind": "karpathy", "dataset": str(dataset), "features": str(features)}
        (tmp / "info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out


def _write_folder(tmp: Path, records, vocab: Vocab, words: list, features, root: Path,
                  pca_dim: int, max_words: int) -> dict:
    pooled = _pooled_features(features, records)
    mean, components = pca_fit(pooled["train"], pca_dim)
    counts, arrays = {}, {}
    for split in SPLITS:
        caps, idxs, dropped = _encode_split(records[split], vocab, max_words)
        arrays[f"{split}_captions"], arrays[f"{split}_image_idxs"] = caps, idxs
        counts[split] = {"images": len(records[split]), "captions": len(caps), "dropped_long": dropped}
        _write_h5(tmp / features_file(split, pca=False), features=pooled[split])
        _write_h5(tmp / features_file(split, pca=True), features=pca_apply(pooled[split], mean, components))
        urls = _copy_images(records[split], root, tmp / "images")
        (tmp / urls_file(split)).write_text("".join(u + "\n" for u in urls), encoding="utf-8")
    _write_h5(tmp / CAPTIONS_FILE, **arrays)
    vocab_json = {"idx_to_word": words, "word_to_idx": {w: i for i, w in enumerate(words)}}
    (tmp / VOCAB_FILE).write_text(json.dumps(vocab_json), encoding="utf-8")
    return {"splits": counts, "vocab_size": len(words), "max_words": max_words,
            "feature_dim": int(pooled["train"].shape[1]), "pca_dim": int(components.shape[0])}


def _pooled_features(path, records) -> dict:
    """{split: (Ni, F) float32}: the mean of each image's region (or grid) features."""
    with open_feature_store(path) as store:
        missing = [r.key for s in SPLITS for r in records[s] if r.key not in store]
        if missing:
            raise FileNotFoundError(f"{len(missing)} images have no features in {path} (first: "
                                    f"{missing[:5]}); extract them or pass the matching feature store")
        return {s: np.stack([store.get(r.key).regions.mean(axis=0) for r in records[s]]).astype(np.float32)
                for s in SPLITS}


def pca_fit(x: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean (F,) and ``min(dim, F)`` principal directions (K, F) of x (Ni, F).

    Fewer images than directions: the remaining directions complete an orthonormal basis.
    Signs are fixed (largest |entry| positive) so the result does not depend on the SVD build.
    """
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"PCA needs at least 2 training images with (Ni, F) features, found {x.shape}")
    mean = x.mean(axis=0, dtype=np.float64)
    k = min(dim, x.shape[1])
    _, _, vt = np.linalg.svd(x - mean, full_matrices=k > min(x.shape))
    comps = vt[:k]
    signs = np.sign(comps[np.arange(k), np.abs(comps).argmax(axis=1)])
    return mean, comps * signs[:, None]


def pca_apply(x: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """(Ni, F) -> (Ni, K) float32."""
    return ((x - mean) @ components.T).astype(np.float32)


def _encode_split(recs: Sequence[ImageRecord], vocab: Vocab, max_words: int):
    """(captions (Nc, max_words + 2) int32, image_idxs (Nc,) int32, number dropped)."""
    rows, idxs, dropped = [], [], 0
    for i, rec in enumerate(recs):
        for tokens in rec.captions:
            if len(tokens) > max_words or not tokens:
                dropped += 1
                continue
            ids = vocab.encode(tokens)
            rows.append(ids + [0] * (max_words + 2 - len(ids)))
            idxs.append(i)
    if not rows:
        raise ValueError(f"no caption has 1..{max_words} words; raise max_words")
    return np.asarray(rows, dtype=np.int32), np.asarray(idxs, dtype=np.int32), dropped


def _copy_images(recs: Sequence[ImageRecord], root: Path, dest: Path) -> list[str]:
    """Copy each image found under ``root`` into ``dest``; the relative paths, in image order."""
    dest.mkdir(exist_ok=True)
    urls = []
    for rec in recs:
        name = Path(rec.filename).name
        for src in (root / str(rec.extra.get("filepath", "")) / rec.filename, root / rec.filename):
            if src.is_file():
                shutil.copyfile(src, dest / name)
                break
        urls.append(f"{dest.name}/{name}")
    return urls


def _write_h5(path: Path, **arrays: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        for name, value in arrays.items():
            f.create_dataset(name, data=value)


# what a folder written by build_data holds (images/ holds copies of the source's images)
COURSE_FILES = (CAPTIONS_FILE, VOCAB_FILE, "info.json",
                *(features_file(split, pca) for split in SPLITS for pca in (False, True)),
                *(urls_file(split) for split in SPLITS))


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` whose contents would be lost: a file, a non-empty folder without
    ``overwrite``, and, even with ``overwrite``, a folder that is not a course data folder or
    that holds other files besides one."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder; expected a new or empty folder for --out, "
                              "choose another --out")
    if not out.is_dir() or not any(out.iterdir()):
        return
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir())
    known = set(COURSE_FILES) | {"images/"}
    foreign = [n for n in names if n not in known]
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    if "info.json" not in names and CAPTIONS_FILE not in names:
        raise FileExistsError(f"{out} is not empty and is not a course data folder (expected {CAPTIONS_FILE} "
                              f"and info.json there to replace it); found {shown}. Choose a new or empty "
                              "--out; nothing was changed")
    if foreign:
        raise FileExistsError(f"{out} holds a course data folder plus other files ({shown}); replacing it would "
                              f"delete them, so it is refused. Move them out of {out} or choose another --out")
    if not overwrite:
        raise FileExistsError(f"{out} already holds a course data folder; pass --overwrite (overwrite=True) to "
                              "replace it, or choose another --out")


def _positive(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, found {value}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m mml.build_data``: see the module docstring and ``--help``."""
    parser = argparse.ArgumentParser(prog="python -m mml.build_data", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", metavar="DIR", help="target folder, new or empty (default: $MML_DATA_DIR or the user cache)")
    parser.add_argument("--train", metavar="N", type=_positive, default=3000,
                        help="shapes world: training images (default 3000)")
    parser.add_argument("--val", metavar="N", type=_positive, default=250,
                        help="shapes world: validation images (default 250)")
    parser.add_argument("--seed", metavar="N", type=int, default=0, help="shapes world: seed (default 0)")
    parser.add_argument("--feature-dim", metavar="N", type=_positive, default=2048,
                        help="shapes world: width of the region features (default 2048)")
    parser.add_argument("--karpathy", metavar="FILE.json",
                        help="build from this Karpathy split file instead of a shapes world")
    parser.add_argument("--features", metavar="STORE",
                        help="with --karpathy: the catcap feature store (.h5 or npz folder)")
    parser.add_argument("--images", metavar="DIR",
                        help="with --karpathy: the image folder (default: beside the split file)")
    parser.add_argument("--pca-dim", metavar="N", type=_positive, default=512,
                        help="width of the PCA-reduced *_pca feature files, fitted on the training images "
                             "(default 512; at most the feature width)")
    parser.add_argument("--max-words", metavar="N", type=_positive, default=15,
                        help="leave out captions longer than this many words; rows are <START> + words + "
                             "<END> (default 15, the course's)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a folder this command wrote before (never one holding other files)")
    args = parser.parse_args(argv)
    if args.karpathy and not args.features:
        parser.error("--karpathy needs --features (a catcap feature store of the same images)")
    if args.features and not args.karpathy:
        parser.error("--features is read with --karpathy only; without it a shapes world is generated")
    for flag, value in (("--karpathy", args.karpathy), ("--features", args.features), ("--images", args.images)):
        if value and not Path(value).exists():
            parser.error(f"{flag} {value} does not exist; check the path")
    try:
        if args.karpathy:
            out = build_from_karpathy(args.karpathy, args.features, args.out, image_root=args.images,
                                      pca_dim=args.pca_dim, max_words=args.max_words, overwrite=args.overwrite)
        else:
            out = build_shapes(args.out, num_train=args.train, num_val=args.val, seed=args.seed,
                               feature_dim=args.feature_dim, pca_dim=args.pca_dim,
                               max_words=args.max_words, overwrite=args.overwrite)
    except (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError, PermissionError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    info = json.loads((out / "info.json").read_text(encoding="utf-8"))
    print(f"wrote {out}: {json.dumps(info['splits'])}, vocabulary {info['vocab_size']} words, "
          f"features {info['feature_dim']} -> PCA {info['pca_dim']}")
    if not os.environ.get("MML_DATA_DIR") and args.out:
        print(f"use it with: export MML_DATA_DIR={out.absolute()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
