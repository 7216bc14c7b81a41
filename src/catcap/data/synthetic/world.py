"""``make_world``: write a shapes world as an ordinary captioning dataset.

Layout of ``out_dir`` (the same files a real dataset has, so it takes the same path)::

    images/<id>.png        the rendered images (id = cocoid = 1, 2, ...)
    dataset_shapes.json    Karpathy format, plus "objects" and "qa" per image
    features.h5            region features (HDF5FeatureStore), key = str(id)
    world.json             how it was made: seed, sizes, counts, generator version

Each image is a function of (seed, id) only: the scene, pixels, region features, captions and
questions draw from separate child streams of ``SeedSequence([seed, id])``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image

from catcap.data.features import HDF5FeatureWriter
from catcap.folders import building_folder
from catcap.progress import progress_bar

from .captions import caption_scene, tokens
from .qa import ask_scene
from .regions import PROJECTION_SEED, region_features
from .render import render_scene
from .scenes import sample_scene

__all__ = ["ENCODER", "WorldPaths", "make_world", "make_image"]

ENCODER = "shapes-synthetic-v1"
DEFAULT_SIZES = {"num_train": 3000, "num_val": 250, "num_test": 250}


@dataclass(frozen=True)
class WorldPaths:
    """Where a world's files are."""

    root: Path
    images: Path
    dataset: Path
    features: Path
    info: Path


def _paths(root: Path) -> WorldPaths:
    return WorldPaths(root, root / "images", root / "dataset_shapes.json", root / "features.h5",
                      root / "world.json")


def make_image(seed: int, image_id: int, image_size: int, feature_dim: int):
    """One image: (pixels (S, S, 3) uint8, RegionFeatures, captions, qa, scene)."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence([seed, image_id]).spawn(5)]
    scene = sample_scene(streams[0])
    rendering = render_scene(scene, image_size, streams[1])
    regions = region_features(rendering, scene.num_distractors, feature_dim, streams[2])
    return rendering, regions, caption_scene(scene, streams[3]), ask_scene(scene, streams[4]), scene


def _entry(imgid: int, image_id: int, split: str, captions, qa, scene, rendering, regions) -> dict:
    sentids = list(range(5 * imgid, 5 * imgid + len(captions)))
    objects = [{"shape": o.shape, "color": o.color, "size": o.size,
                "box": [round(float(v), 4) for v in box], "region": row}
               for o, box, row in zip(scene.objects, rendering.boxes, regions.object_region)]
    return {
        "imgid": imgid, "cocoid": image_id, "filename": f"{image_id}.png", "filepath": "images",
        "split": split,
        "sentences": [{"raw": raw, "tokens": tokens(raw), "imgid": imgid, "sentid": sid}
                      for raw, sid in zip(captions, sentids)],
        "sentids": sentids, "objects": objects, "regions": regions.kinds,
        "background": {"tone": scene.background.tone, "texture": scene.background.texture},
        "qa": qa,
    }


# what a finished world folder may hold: synth's files, plus the CIDEr-D df cache that
# `catcap train` / `catcap prepare` write next to the dataset JSON (recomputed when missing)
WORLD_FILES = ("dataset_shapes.json", "features.h5", "world.json", "images/")
_WORLD_EXTRA = re.compile(r"dataset_shapes\.[^/]+\.cider-df\.npz|\.dataset_shapes\.[^/]+\.cider-df\.npz\.[^/]+\.tmp")
_IMAGE_NAME = re.compile(r"\d+\.png")


def _is_world_info(path: Path) -> bool:
    """``path`` is a world.json that make_world wrote (its generator is a shapes generator)."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and str(info.get("generator", "")).startswith("shapes-synthetic")


def _foreign_entries(out: Path) -> tuple[bool, list[str]]:
    """(whether ``out`` holds a shapes world, the entries that are not part of one)."""
    marked, foreign = False, []
    for entry in sorted(out.iterdir()):
        name = entry.name
        if name == "dataset_shapes.json" and entry.is_file() or name == "world.json" and _is_world_info(entry):
            marked = True
        elif name == "features.h5" and entry.is_file() or _WORLD_EXTRA.fullmatch(name) and entry.is_file():
            pass
        elif name == "images" and entry.is_dir() and not entry.is_symlink():
            foreign += [f"images/{p.name}" for p in sorted(entry.iterdir())
                        if not (_IMAGE_NAME.fullmatch(p.name) and p.is_file())]
        else:
            foreign.append(name + ("/" if entry.is_dir() else ""))
    return marked, foreign


def _listed(names: list[str], limit: int = 5) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _check_target(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` whose contents would be lost: a file, a non-empty folder without
    ``overwrite``, and, even with ``overwrite``, a folder holding anything but a shapes world."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a directory; choose another out_dir")
    if not out.is_dir() or not any(out.iterdir()):
        return
    marked, foreign = _foreign_entries(out)
    layout = f"a folder written by catcap synth ({', '.join(WORLD_FILES)})"
    if not marked:
        raise FileExistsError(
            f"{out} is not empty and is not a shapes world: expected a new or empty folder, or "
            f"{layout} to replace; found {_listed(sorted(p.name for p in out.iterdir()))}. "
            "overwrite=True (CLI: --overwrite) replaces only a shapes world, never other files: choose a "
            "new or empty out_dir (CLI: --out); nothing was changed")
    if foreign:
        raise FileExistsError(
            f"{out} holds a shapes world plus files that are not part of one ({_listed(foreign)}); "
            f"replacing the world would delete them, so it is refused. Move those files out of {out} "
            "or choose another out_dir (CLI: --out); nothing was changed")
    if not overwrite:
        raise FileExistsError(f"{out} already holds a shapes world; pass overwrite=True (CLI: --overwrite) to "
                              "replace it, or choose another out_dir")


def _generate(root: Path, split_sizes: dict, seed: int, image_size: int, feature_dim: int,
              progress: bool) -> list[dict]:
    (root / "images").mkdir()
    meta = {"kind": "regions", "encoder": ENCODER, "image_size": image_size,
            "projection_seed": PROJECTION_SEED}
    entries, image_id = [], 0
    total = sum(split_sizes.values())
    with HDF5FeatureWriter(root / "features.h5", feature_dim, meta) as writer, \
            progress_bar(total=total, desc="shapes world", unit="img", enabled=progress) as bar:
        for split, count in split_sizes.items():
            for _ in range(count):
                image_id += 1
                rendering, regions, captions, qa, scene = make_image(seed, image_id, image_size, feature_dim)
                Image.fromarray(rendering.image).save(root / "images" / f"{image_id}.png", format="PNG",
                                                      compress_level=1)
                writer.write(str(image_id), regions.features, regions.boxes)
                entries.append(_entry(len(entries), image_id, split, captions, qa, scene, rendering, regions))
                bar.update(1)
    return entries


def make_world(out_dir: Union[str, os.PathLike], *, num_train: int = 3000, num_val: int = 250,
               num_test: int = 250, seed: int = 0, image_size: int = 128, feature_dim: int = 2048,
               progress: bool = True, overwrite: bool = False) -> WorldPaths:
    """Generate a shapes world into ``out_dir``; the default (3000/250/250) is a CPU demo.

    Built in a temporary folder beside ``out_dir`` and renamed into place at the end, so an
    interrupted run leaves no half world. A non-empty ``out_dir`` is refused unless it holds a
    world (and nothing else: :data:`WORLD_FILES`, the CIDEr-D df cache) and ``overwrite=True``;
    a folder with any other file is never replaced. Same arguments -> byte-identical JSON,
    pixels and features.
    """
    sizes = {"train": num_train, "val": num_val, "test": num_test}
    for name, value in [*sizes.items(), ("image_size", image_size), ("feature_dim", feature_dim)]:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, found {value!r}")
    if sum(sizes.values()) == 0 or image_size < 32 or feature_dim < 1:
        raise ValueError(f"expected at least one image, image_size >= 32 and feature_dim >= 1; found "
                         f"{sum(sizes.values())} images, image_size={image_size}, feature_dim={feature_dim}")
    out = Path(out_dir).absolute()
    _check_target(out, overwrite)
    with building_folder(out) as tmp:
        entries = _generate(tmp, {k: v for k, v in sizes.items() if v}, seed, image_size, feature_dim, progress)
        text = json.dumps({"dataset": "shapes", "images": entries})
        (tmp / "dataset_shapes.json").write_text(text, encoding="utf-8")
        info = {"generator": ENCODER, "seed": seed, "image_size": image_size,
                "feature_dim": feature_dim, "splits": sizes, "projection_seed": PROJECTION_SEED}
        (tmp / "world.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return _paths(out)
