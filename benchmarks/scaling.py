"""How catcap's time and memory grow with the work: images, beam size, length, threads, data.

Every point runs in a fresh process (so that its peak resident memory is its own) and prints
one JSON line; the driver collects them into a Markdown table, fits the growth of each sweep
(the exponent k of time ~ x^k between the sweep's ends, and the factor per doubling 2^k) and
draws ``scaling.png`` (time) and ``scaling_memory.png`` (peak memory).

Sizes (both the Transformer, random weights, so that only the size differs):
  paper  D=512, 8 heads, 3+3 layers, d_ff 2048, 50 regions x 2048, vocab 10,000
  small  catcap's Flickr8k recipe size: D=256, 8 heads, 3+3 layers, d_ff 1024, 49 regions x
         1280 (EfficientNet-Lite0 7x7), vocab 2,600
Decoding runs as `catcap evaluate --checkpoint` runs it: batches of 50 images, features made
batch by batch (never all at once), ``<eos>`` suppressed so every caption runs the full length.
Training: one XE epoch, batches of 50 captions of 16 words, Adam, as `decode.py`'s step.

Sweeps (defaults beam 3, length 16, 1 thread, 500 images):
  images 50, 500, 5000 (greedy and beam 3) | beam 1, 3, 5, 10 | length 16, 32 | threads 1, 2 |
  training captions 500, 1000, 2000 (one epoch)
``--quick`` divides the images and captions by 10 (a check that the script runs, not numbers).

Usage: python benchmarks/scaling.py [--sizes paper small] [--quick] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

SIZES = {
    "paper": dict(d_model=512, d_ff=2048, feature_dim=2048, regions=50, vocab=10000),
    "small": dict(d_model=256, d_ff=1024, feature_dim=1280, regions=49, vocab=2600),
}
BASE = dict(images=500, beam=3, max_len=16, threads=1)
SWEEPS = {
    "images (greedy)": ("images", [50, 500, 5000], dict(beam=1)),
    "images (beam 3)": ("images", [50, 500, 5000], {}),
    "beam size": ("beam", [1, 3, 5, 10], {}),
    "max length (beam 3)": ("max_len", [16, 32], {}),
    "threads (beam 3)": ("threads", [1, 2], {}),
    "train captions (one XE epoch)": ("captions", [500, 1000, 2000], dict(job="train")),
}
BATCH = 50


def run_point(point: dict) -> dict:
    """Time one point in this process; returns it with ``seconds`` and ``peak_mb``."""
    import torch

    from catcap.config import load_config
    from catcap.decoding import beam_search, build_processors, greedy
    from catcap.models.builders import build_captioner
    from catcap.training.experiment import ExperimentConfig
    from catcap.training.losses import cross_entropy
    from catcap.training.setup import make_optimizer

    torch.set_num_threads(point["threads"])
    size = SIZES[point["size"]]
    cfg = load_config(ExperimentConfig, Path(__file__).resolve().parents[1] / "configs/models/transformer.yaml",
                      [f"model.{k}={size[k]}" for k in ("d_model", "d_ff", "feature_dim")])
    torch.manual_seed(0)
    model = build_captioner(cfg.model, size["vocab"])
    gen = torch.Generator().manual_seed(0)

    def features(n):
        return torch.randn(n, size["regions"], size["feature_dim"], generator=gen), \
            torch.ones(n, size["regions"], dtype=torch.bool)

    start = time.perf_counter()
    if point.get("job") == "train":
        opt = make_optimizer(list(model.parameters()), torch.device("cpu"), lr=1e-4)
        model.train()
        for first in range(0, point["captions"], BATCH):
            n = min(BATCH, point["captions"] - first)
            feats, mask = features(n)
            caps = torch.randint(4, size["vocab"], (n, 18), generator=gen)
            caps[:, 0], caps[:, -1] = model.bos_id, model.eos_id
            cmask = torch.ones_like(caps, dtype=torch.bool)
            logits, _ = model(feats, mask, caps, cmask)
            loss = cross_entropy(logits, caps[:, 1:], cmask[:, 1:])
            opt.zero_grad()
            loss.backward()
            opt.step()
    else:
        model.eval()
        no_eos = build_processors(model.eos_id, suppress_eos=True)
        with torch.no_grad():
            for first in range(0, point["images"], BATCH):
                feats, mask = features(min(BATCH, point["images"] - first))
                if point["beam"] == 1:
                    greedy(model, feats, mask, max_len=point["max_len"], processors=no_eos)
                else:
                    beam_search(model, feats, mask, beam_size=point["beam"], max_len=point["max_len"],
                                processors=no_eos)
    seconds = time.perf_counter() - start
    return dict(point, seconds=round(seconds, 3), peak_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))


def measure(point: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(point["threads"]))
    out = subprocess.run([sys.executable, __file__, "--point", json.dumps(point)], capture_output=True, text=True,
                         env=env, check=True, cwd=Path(__file__).parent)
    return json.loads(out.stdout.strip().splitlines()[-1])


def growth(rows: list[dict], key: str) -> str:
    """``time ~ x^k`` between the sweep's ends, and the factor per doubling of x."""
    a, b = rows[0], rows[-1]
    k = math.log(b["seconds"] / a["seconds"]) / math.log(b[key] / a[key])
    return f"x^{k:.2f} (x{2 ** k:.2f} per doubling)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--point", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--sweeps", nargs="+", default=list(SWEEPS), choices=list(SWEEPS), metavar="SWEEP")
    parser.add_argument("--quick", action="store_true", help="a tenth of the images and captions")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"), help="where the PNGs go")
    args = parser.parse_args()
    if args.point:
        print(json.dumps(run_point(json.loads(args.point))))
        return
    results: dict[tuple[str, str], list[dict]] = {}
    for size in args.sizes:
        for sweep in args.sweeps:
            key, values, fixed = SWEEPS[sweep]
            rows = []
            for value in values:
                point = dict(BASE, size=size, **fixed, **{key: value})
                if args.quick and key in ("images", "captions"):
                    point[key] = max(10, value // 10)
                if args.quick and key != "images" and "images" in point:
                    point["images"] //= 10
                rows.append(measure(point))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            results[size, sweep] = rows
    report(results, Path(args.out))


def report(results: dict, out: Path) -> None:
    print("| size | sweep | points: value -> seconds (peak MB) | growth of time |")
    print("|---|---|---|---|")
    for (size, sweep), rows in results.items():
        key = SWEEPS[sweep][0]
        points = ", ".join(f"{r[key]} -> {r['seconds']:.2f} s ({r['peak_mb']:.0f})" for r in rows)
        print(f"| {size} | {sweep} | {points} | {growth(rows, key)} |")
    plot(results, out)


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = list(dict.fromkeys(s for _, s in results))
    for field, label, name in (("seconds", "seconds", "scaling.png"), ("peak_mb", "peak resident MB", "scaling_memory.png")):
        fig, axes = plt.subplots(1, len(sweeps), figsize=(3.2 * len(sweeps), 3.2), squeeze=False)
        for ax, sweep in zip(axes[0], sweeps):
            key = SWEEPS[sweep][0]
            for (size, s), rows in results.items():
                if s == sweep:
                    ax.plot([r[key] for r in rows], [r[field] for r in rows], "o-", label=size)
            if key in ("images", "captions"):
                ax.set_xscale("log")
                ax.set_yscale("log" if field == "seconds" else "linear")
            ax.set_title(sweep, fontsize=9)
            ax.set_xlabel(key)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0][0].legend()
        fig.tight_layout()
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        print(f"\nwrote {out / name}")


if __name__ == "__main__":
    main()
