"""Real COCO 2014 captions for benchmarks, read from the SPICE jar that pycocoevalcap ships.

The jar holds the official captions_train2014.json and captions_val2014.json (no images).
They are extracted once into benchmarks/_work/ (git-ignored) and never committed.
"""

from __future__ import annotations

import collections
import json
import sys
import zipfile
from importlib.util import find_spec
from pathlib import Path

WORK = Path(__file__).parent / "_work"


def spice_jar() -> Path:
    spec = find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("pycocoevalcap is not installed: pip install 'catcap[dev]' (it carries the COCO caption files)")
    return Path(list(spec.submodule_search_locations)[0]) / "spice" / "spice-1.0.jar"


def caption_file(split: str) -> Path:
    """Path of captions_{split}2014.json, extracted from the SPICE jar on first use."""
    out = WORK / f"captions_{split}2014.json"
    if not out.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(spice_jar()) as z:
            tmp = out.with_suffix(".part")
            tmp.write_bytes(z.read(f"coco/annotations/captions_{split}2014.json"))
            tmp.replace(out)
    return out


def captions_by_image(split: str) -> dict[int, list[str]]:
    """{image_id: [captions]} in annotation-id order, images sorted by id."""
    data = json.loads(caption_file(split).read_text(encoding="utf-8"))
    caps = collections.defaultdict(list)
    for ann in sorted(data["annotations"], key=lambda a: a["id"]):
        caps[ann["image_id"]].append(ann["caption"])
    return dict(sorted(caps.items()))
