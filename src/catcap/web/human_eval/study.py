"""Making and reading a pairwise human-evaluation study (``catcap human-eval create``).

A study folder holds:

- ``study.json``: the manifest: the two systems (their names and result files), the criteria,
  the N items (image id, the study's own copy of the image, both captions, the references) and,
  per rater, the order in which the rater sees the items and, per item, whether system A's
  caption is shown on the left;
- ``images/``: the N images as JPEGs (at most 640 px a side), so the study does not depend on
  the original image folder;
- ``votes.sqlite``: the votes (:mod:`catcap.web.human_eval.store`, SQLite in WAL mode).

Randomisation (seeded, so the same inputs and seed give the same study): the N images are a
random sample of the images both systems captioned; each rater's presentation order is a random
permutation; left/right is balanced per rater (A on the left for ceil(N/2) or floor(N/2)
items) and per image (raters come in pairs, the second of a pair sees the mirror of the first's
sides, so each image shows A on the left to floor(R/2) or ceil(R/2) raters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from catcap.atomic import write_bytes_atomic, write_json_atomic
from catcap.folders import building_folder
from catcap.metrics.files import load_references, load_results, read_json
from catcap.web.images import check_folder, find_images, jpeg_thumbnail
from catcap.web.report import check_names
from catcap.web.human_eval.store import VoteStore

FORMAT = "catcap-human-eval-study"
VERSION = 1
MANIFEST = "study.json"
VOTES = "votes.sqlite"
IMAGE_SIDE = 640
CRITERIA = (
    {"key": "relevance", "question": "Which caption is more relevant to the image?",
     "hint": "it describes what the image shows: the right objects, actions and scene"},
    {"key": "coherence", "question": "Which caption is more coherent?",
     "hint": "it reads as fluent, well-formed English, whatever the image"},
)
RATER_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


@dataclass
class Study:
    """A loaded study: its folder and manifest, with helpers to read it."""

    folder: Path
    manifest: dict

    @property
    def items(self) -> list[dict]:
        return self.manifest["items"]

    @property
    def raters(self) -> dict[str, dict]:
        return {r["id"]: r for r in self.manifest["raters"]}

    @property
    def criteria(self) -> list[str]:
        return [c["key"] for c in self.manifest["criteria"]]

    @property
    def names(self) -> dict[str, str]:
        """{'A': name of system A, 'B': name of system B}."""
        return {k: v["name"] for k, v in self.manifest["systems"].items()}

    def left_system(self, rater: str, item: int) -> str:
        """'A' or 'B': whose caption the rater sees on the left for this item."""
        return "A" if self.raters[rater]["a_left"][item] else "B"

    def store(self) -> VoteStore:
        return VoteStore(self.folder / VOTES)


def parse_rater_ids(rater_ids: str | Sequence[str] | None, raters: int | None) -> list[str]:
    """The raters' ids: ``r1..rN`` by default, or the names given (letters, digits, _ and -)."""
    if rater_ids is None:
        if raters is None or raters < 1:
            raise ValueError(f"--raters must be >= 1 (the paper used 5), got {raters}")
        return [f"r{i + 1}" for i in range(raters)]
    ids = [r.strip() for r in (rater_ids.split(",") if isinstance(rater_ids, str) else rater_ids) if r.strip()]
    bad = [r for r in ids if not RATER_ID.match(r)]
    if bad or not ids:
        raise ValueError(f"rater ids may use letters, digits, '_' and '-' (1-40 characters), separated by commas; "
                         f"got {bad or rater_ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"rater ids must be distinct; got {ids}")
    if raters is not None and raters != len(ids):
        raise ValueError(f"--raters {raters} but {len(ids)} --rater-ids given; give one of them, or matching ones")
    return ids


def _sort_key(image_id: Any) -> tuple:
    return (type(image_id).__name__, image_id)


def pick_images(ids_a: Sequence, ids_b: Sequence, n: int, rng: np.random.Generator) -> list:
    """N image ids both systems captioned, a seeded random sample, in sampled order."""
    common = sorted(set(ids_a) & set(ids_b), key=_sort_key)
    if n < 1:
        raise ValueError(f"--n must be >= 1 (the number of images to rate), got {n}")
    if n > len(common):
        raise ValueError(f"--n {n} images asked, but only {len(common)} image(s) are captioned by both systems; "
                         f"use --n {len(common)} or fewer")
    return [common[i] for i in rng.permutation(len(common))[:n]]


def rater_orders(n: int, raters: int, rng: np.random.Generator) -> list[dict]:
    """Per rater: ``order`` (a permutation of the items) and ``a_left`` (per item, in item
    order), balanced as the module docstring says."""
    out, sides = [], None
    for r in range(raters):
        if r % 2 == 0:  # the first of a pair: A left on ceil(N/2) items (floor(N/2) for every other pair)
            on_left = (n + 1) // 2 if (r // 2) % 2 == 0 else n // 2
            sides = rng.permutation(np.arange(n) < on_left)
        else:  # the second of a pair: the mirror image
            sides = ~sides
        out.append({"order": [int(i) for i in rng.permutation(n)], "a_left": [bool(s) for s in sides]})
    return out


def create_study(out: str | Path, a: str | Path, b: str | Path, refs: str | Path, images: str | Path, *,
                 split: str | None = None, n: int = 100, raters: int | None = 5,
                 rater_ids: str | Sequence[str] | None = None, seed: int = 0,
                 names: str | Sequence[str] | None = None) -> Study:
    """Make a study folder (see the module docstring). Everything is checked before any image
    is copied; an existing ``out`` is never replaced (it may hold votes)."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; a study folder is never overwritten (it may hold votes): "
                              "choose a new --out folder")
    label = check_names(names)
    ids = parse_rater_ids(rater_ids, raters)
    check_folder(images)
    references = load_references(refs, split)
    res_a, res_b = load_results(a, refs), load_results(b, refs)
    rng = np.random.default_rng(seed)
    chosen = pick_images([k for k in res_a if k in references], [k for k in res_b if k in references], n, rng)
    files = find_images(chosen, refs, images)
    orders = rater_orders(len(chosen), len(ids), rng)
    manifest = {
        "format": FORMAT, "version": VERSION, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seed": seed, "references": str(refs), "split": split,
        "systems": {"A": {"name": label[0], "results": str(a)}, "B": {"name": label[1], "results": str(b)}},
        "criteria": [dict(c) for c in CRITERIA],
        "raters": [{"id": rid, **o} for rid, o in zip(ids, orders)],
        "items": [{"item": i, "image_id": k, "image": f"images/{i:05d}.jpg", "caption_a": res_a[k],
                   "caption_b": res_b[k], "references": references[k]} for i, k in enumerate(chosen)],
    }
    with building_folder(out) as tmp:
        (tmp / "images").mkdir()
        for item in manifest["items"]:
            write_bytes_atomic(tmp / item["image"], jpeg_thumbnail(files[item["image_id"]], IMAGE_SIDE))
        VoteStore(tmp / VOTES).create()
        write_json_atomic(tmp / MANIFEST, manifest)
    return Study(out, manifest)  # the caller says what was written (catcap human-eval create prints it once)


def load_study(folder: str | Path) -> Study:
    """Read and check a study folder made by :func:`create_study`."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise FileNotFoundError(f"{folder} is not a study folder: no {MANIFEST} in it "
                                "(make one with catcap human-eval create ... --out FOLDER)")
    manifest = read_json(folder / MANIFEST, "study manifest")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{folder / MANIFEST} is not a catcap human-eval study manifest "
                         f"(expected \"format\": \"{FORMAT}\")")
    if manifest.get("version") != VERSION:
        raise ValueError(f"{folder / MANIFEST} has study format version {manifest.get('version')}; "
                         f"this catcap reads version {VERSION}")
    if not (folder / VOTES).is_file():
        raise FileNotFoundError(f"{folder / VOTES} is missing; the study's vote database was deleted or moved")
    _check_manifest(folder / MANIFEST, manifest)
    return Study(folder, manifest)


def _check_manifest(path: Path, manifest: dict) -> None:
    """The parts of study.json the server and the export read, with their types: a manifest
    edited by hand fails here, naming the key, not later inside a summary."""
    def need(ok: bool, key: str, expected: str, found) -> None:
        if not ok:
            raise ValueError(f"{path}: {key}: expected {expected}, found {found!r:.80}; the study manifest was edited "
                             "or damaged: restore it from a copy (it is written once, by catcap human-eval create)")

    items, raters, criteria, systems = (manifest.get(k) for k in ("items", "raters", "criteria", "systems"))
    need(isinstance(items, list) and items != [], "items", "a non-empty list", items)
    for i, item in enumerate(items):
        need(isinstance(item, dict) and item.get("item") == i and "image_id" in item, f"items[{i}]",
             f'an object with "item": {i} and an "image_id"', item)
    need(isinstance(raters, list) and raters != [], "raters", "a non-empty list", raters)
    for i, r in enumerate(raters):
        need(isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("order"), list)
             and isinstance(r.get("a_left"), list) and len(r["a_left"]) == len(items), f"raters[{i}]",
             f'an object with a text "id" and "order" and "a_left" lists ({len(items)} items)', r)
    need(isinstance(criteria, list) and criteria != [] and all(isinstance(c, dict) and isinstance(c.get("key"), str)
                                                               for c in criteria),
         "criteria", 'a non-empty list of objects with a text "key"', criteria)
    need(isinstance(systems, dict) and all(isinstance(systems.get(s), dict) and isinstance(systems[s].get("name"), str)
                                           for s in "AB"), "systems", 'objects "A" and "B" with a text "name"', systems)
