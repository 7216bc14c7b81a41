"""Images/s of `catcap extract` (efficientnet-lite0) on real Flickr8k photos, per worker count.

    .venv/bin/python benchmarks/extract.py [--images 200] [--workers 0,1,2] [--batch-size 32]

Each run extracts the first N photos (sorted by name) of ../shared/data/flickr8k/images into a
fresh temporary .h5 (JPEG decoding + preprocessing in the workers, inference in the main process);
the time includes the DataLoader start and the HDF5 writes, not the model load.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import torch

from catcap.features import ImageEncoder, extract_features

IMAGES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k" / "images"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--encoder", default="efficientnet-lite0")
    args = ap.parse_args()
    paths = sorted(IMAGES.glob("*.jpg"))[:args.images]
    enc = ImageEncoder(args.encoder)
    print(f"{args.encoder}, {len(paths)} Flickr8k photos, batch {args.batch_size}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op threads, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    print("| workers | images/s | seconds |\n|---|---|---|")
    for w in (int(x) for x in args.workers.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            res = extract_features(paths, Path(tmp) / "f.h5", enc, batch_size=args.batch_size, workers=w,
                                   progress=False)
        print(f"| {w} | {res.images_per_second:.1f} | {res.seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
