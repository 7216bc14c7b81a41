"""Whole-process time of `catcap evaluate` against pycocoevalcap's, on 1,000 COCO val2014 captions.

What a user waits for when scoring a result file: start the interpreter, import, read the
results and the references (the official captions_val2014.json: 40,504 images, 202,654
captions), PTB-tokenise, score BLEU-1..4, ROUGE-L and CIDEr-D, print. Both sides run as fresh
processes, alternating, and the medians are compared (issue 25 target: catcap >= 4x faster).

The candidate of image i is its first human caption (the first 1,000 image ids); the
references are all of its captions, as `captions_val2014.json` holds them. The reference side
is pycocoevalcap 1.2 the way its README uses it: pycocotools' COCO + loadRes, then the Java
PTB tokenizer, Bleu(4), Rouge and Cider on the result's image ids (METEOR and SPICE left out
on both sides: their Java time is the same jar either way).

catcap's first run builds the reference index (`catcap.metrics.refs_cache`); it is timed on
its own ("first run") and the later runs read the index ("warm").

Usage: python benchmarks/evaluate_startup.py [--repeats 7]     (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coco_text import caption_file

REFERENCE_SCRIPT = """
import sys
from pycocotools.coco import COCO
from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
from pycocoevalcap.bleu.bleu import Bleu
from pycocoevalcap.rouge.rouge import Rouge
from pycocoevalcap.cider.cider import Cider
coco = COCO(sys.argv[2])
res = coco.loadRes(sys.argv[1])
ids = res.getImgIds()
tok = PTBTokenizer()
gts = tok.tokenize({i: coco.imgToAnns[i] for i in ids})
rs = tok.tokenize({i: res.imgToAnns[i] for i in ids})
for name, scorer in (("Bleu", Bleu(4)), ("ROUGE_L", Rouge()), ("CIDEr", Cider())):
    print(name, scorer.compute_score(gts, rs)[0])
"""


def write_results(refs: Path, out: Path, n: int) -> None:
    data = json.loads(refs.read_text(encoding="utf-8"))
    first: dict[int, str] = {}
    for ann in data["annotations"]:
        first.setdefault(ann["image_id"], ann["caption"])
    ids = sorted(first)[:n]
    out.write_text(json.dumps([{"image_id": i, "caption": first[i]} for i in ids]))


def timed(cmd: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - start, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each side (default 7)")
    parser.add_argument("--images", type=int, default=1000, help="captions to score (default 1000)")
    args = parser.parse_args()
    refs = caption_file("val")
    work = Path(tempfile.mkdtemp(prefix="evaluate_startup."))
    results, script = work / "results.json", work / "reference.py"
    write_results(refs, results, args.images)
    script.write_text(REFERENCE_SCRIPT)
    env = dict(os.environ, CATCAP_CACHE_DIR=str(work / "cache"), OMP_NUM_THREADS="1")
    catcap = [sys.executable, "-m", "catcap", "evaluate", "--results", str(results), "--refs", str(refs),
              "--metrics", "bleu,rouge,cider", "--quiet"]
    reference = [sys.executable, str(script), str(results), str(refs)]
    timed(reference, env)  # warm the page cache and the JVM's class data once
    first, out = timed(catcap, env)
    times: dict[str, list[float]] = {"catcap": [], "pycocoevalcap": []}
    outputs = {}
    for _ in range(args.repeats):
        for name, cmd in (("catcap", catcap), ("pycocoevalcap", reference)):
            seconds, outputs[name] = timed(cmd, env)
            times[name].append(seconds)
    shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"| {args.images} captions vs captions_val2014.json | median of {args.repeats} | min |")
    print("|---|---|---|")
    print(f"| pycocoevalcap 1.2 (COCO API + Java PTB + Bleu/Rouge/Cider) | {med['pycocoevalcap']:.3f} s | "
          f"{min(times['pycocoevalcap']):.3f} s |")
    print(f"| catcap evaluate, first run (builds the reference index) | {first:.3f} s | |")
    print(f"| catcap evaluate (warm) | {med['catcap']:.3f} s | {min(times['catcap']):.3f} s |")
    print(f"\nspeed-up (medians): {med['pycocoevalcap'] / med['catcap']:.2f}x; first run: "
          f"{med['pycocoevalcap'] / first:.2f}x")
    print("\ncatcap:\n" + outputs["catcap"] + "pycocoevalcap:\n" + outputs["pycocoevalcap"])


if __name__ == "__main__":
    main()
