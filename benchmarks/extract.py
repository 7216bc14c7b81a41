"""Images/s of `catcap extract` on real Flickr8k photos: per worker count, or the whole set end to end.

    .venv/bin/python benchmarks/extract.py [--backend torch|onnx] [--images 200] [--workers 0,1,2]
    .venv/bin/python benchmarks/extract.py --backend onnx --full --workers 1

Per worker count: each run extracts the first N photos (sorted by name) of
../shared/data/flickr8k/images into a fresh temporary .h5 (JPEG decoding + preprocessing in the
workers, inference in the main process); the time includes the DataLoader start and the HDF5
writes, not the model load.

``--full``: runs the command a user runs, ``catcap extract`` on all 7,000 photos into a fresh .h5,
as a subprocess, and reports its wall time (model load and, for onnx, the check against PyTorch
included; the ONNX export is cached beforehand) and the peak resident memory of the whole process
tree (main process + decoding workers, sampled from /proc every 0.1 s).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from catcap.features import extract_features, make_encoder

IMAGES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k" / "images"


def _tree_rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total


def run_full(args) -> None:
    make_encoder(args.encoder, args.backend)  # export (onnx) once, outside the timing
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "catcap", "extract", "--images", str(IMAGES), "--out", f"{tmp}/f.h5",
               "--encoder", args.encoder, "--backend", args.backend, "--workers", args.workers,
               "--batch-size", str(args.batch_size), "--quiet"]
        t0, peak = time.perf_counter(), 0
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        while proc.poll() is None:
            peak = max(peak, _tree_rss_bytes(proc.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out = proc.stdout.read().strip()
        size = os.path.getsize(f"{tmp}/f.h5") if os.path.exists(f"{tmp}/f.h5") else 0
    n = len(list(IMAGES.glob("*.jpg")))
    print(f"`{' '.join(['catcap', *cmd[3:]])}`\n")
    print(f"{out}\n")
    print("| backend | workers | images | wall s (all in) | images/s (all in) | peak RSS, all processes | file |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.backend} | {args.workers} | {n} | {wall:.1f} | {n / wall:.1f} | {peak / 2**20:.0f} MiB | "
          f"{size / 2**30:.2f} GiB |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--encoder", default="efficientnet-lite0")
    ap.add_argument("--backend", default="torch", choices=["torch", "onnx"])
    ap.add_argument("--full", action="store_true", help="all photos through the catcap extract command")
    args = ap.parse_args()
    print(f"{args.encoder}, backend {args.backend}, batch {args.batch_size}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op threads, {os.cpu_count()} CPUs, "
          f"{platform.processor() or platform.machine()}\n")
    if args.full:
        return run_full(args)
    paths = sorted(IMAGES.glob("*.jpg"))[:args.images]
    enc = make_encoder(args.encoder, args.backend)
    print("| workers | images/s | seconds |\n|---|---|---|")
    for w in (int(x) for x in args.workers.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            res = extract_features(paths, Path(tmp) / "f.h5", enc, batch_size=args.batch_size, workers=w,
                                   progress=False)
        print(f"| {w} | {res.images_per_second:.1f} | {res.seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
