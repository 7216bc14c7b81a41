"""Inputs of benchmarks/gpu_checks.sh's photo steps, made on a machine that has the photos.

    python benchmarks/gpu_inputs.py [--count 400] [--out .gpu_data]
    catcap caption .gpu_data/photos --json --beam 3 > .gpu_data/cpu_captions.json

Copies the first COUNT Flickr8k val photos by name (../shared/data/flickr8k/images, split from
data/flickr8k/dataset_flickr8k.json, `catcap import`) to OUT/photos and writes their reference
captions to OUT/refs.json ({"photo name": [captions]}). A GPU machine gets them by carrying OUT
(add it to .git/info/exclude: the photos are never committed); 400 photos are about 11 MB."""

import argparse
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=400)
    ap.add_argument("--out", default=".gpu_data")
    ap.add_argument("--dataset", default=str(ROOT / "data" / "flickr8k" / "dataset_flickr8k.json"))
    ap.add_argument("--images", default=str(ROOT.parent / "shared" / "data" / "flickr8k" / "images"))
    args = ap.parse_args()
    images = json.loads(Path(args.dataset).read_text())["images"]
    val = sorted((i for i in images if i["split"] == "val"), key=lambda i: i["filename"])[:args.count]
    photos = Path(args.out) / "photos"
    photos.mkdir(parents=True, exist_ok=True)
    for image in val:
        shutil.copy(Path(args.images) / image["filename"], photos)
    refs = {i["filename"]: [s["raw"] for s in i["sentences"]] for i in val}
    (Path(args.out) / "refs.json").write_text(json.dumps(refs))
    print(f"{len(val)} photos in {photos}, references in {Path(args.out) / 'refs.json'}")


if __name__ == "__main__":
    main()
