"""The bundled model on a GPU, from photo files: fp32 and bf16 against the CPU's captions.

    python benchmarks/gpu_captions.py --photos DIR --refs REFS.json [--cpu CPU.json] [--beam 3]

Captions every photo of DIR with ``zoo/flickr8k-cat`` (photo -> EfficientNet-Lite2 -> CAT,
beam search, the unpipelined path so autocast covers both stages) on CUDA in fp32 (TF32 off)
and under bf16 autocast (as ``--precision bf16``), times both (``torch.cuda.synchronize``
around each run, after a warm-up batch), and scores each against REFS ({"photo name":
[references]}) with catcap's CIDEr-D and BLEU-4. With --cpu (a JSON list of {"image",
"caption"} from ``catcap caption DIR --json`` on a CPU) it also counts the captions that are
word for word the same. Prints one JSON object. Issue 25's bf16 question on a GPU: is bf16
within 0.5% CIDEr-D of fp32 on the same checkpoint?"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from catcap import api
from catcap.metrics.evaluate import evaluate_captions
from catcap.training.precision import Precision


def caption_all(job, precision: str) -> tuple[dict[str, str], float]:
    with Precision(precision, torch.device("cuda")).autocast():  # as catcap train --precision
        list(job.batches(0, batch_size=32, workers=2, pipelined=False))  # warm-up: kernels, page cache
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = [c for batch in job.batches(0, batch_size=32, workers=4, pipelined=False) for c in batch]
        torch.cuda.synchronize()
    return {Path(c.image).name: c.caption for c in out}, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", required=True, help="folder of photos")
    ap.add_argument("--refs", required=True, help='JSON {"photo name": [reference captions]}')
    ap.add_argument("--cpu", help="JSON list of {image, caption} captioned on a CPU (catcap caption --json)")
    ap.add_argument("--beam", type=int, default=3)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    photos = sorted(str(p) for p in Path(args.photos).glob("*.jpg"))
    refs = json.loads(Path(args.refs).read_text())
    job = api.prepare_caption(None, photos, num_beams=args.beam, device="cuda")
    report = {"photos": len(photos), "beam": args.beam, "device": torch.cuda.get_device_name()}
    runs = {}
    for precision in ("fp32", "bf16"):
        runs[precision], seconds = caption_all(job, precision)
        scores = evaluate_captions(runs[precision], refs, "bleu,cider").corpus
        report[precision] = {"seconds": round(seconds, 3), "img_s": round(len(photos) / seconds, 1),
                             "CIDEr-D": round(100 * scores["CIDEr"], 2), "BLEU-4": round(100 * scores["Bleu_4"], 2)}
    report["bf16_same_captions_as_fp32"] = sum(runs["bf16"][k] == v for k, v in runs["fp32"].items())
    report["bf16_cider_change_pct"] = round(100 * (report["bf16"]["CIDEr-D"] / report["fp32"]["CIDEr-D"] - 1), 2)
    if args.cpu:
        cpu = {Path(r["image"]).name: r["caption"] for r in json.loads(Path(args.cpu).read_text())}
        cpu = {k: cpu[k] for k in runs["fp32"] if k in cpu}
        cpu_scores = evaluate_captions(cpu, refs, "bleu,cider").corpus
        report["cpu_fp32"] = {"CIDEr-D": round(100 * cpu_scores["CIDEr"], 2),
                              "BLEU-4": round(100 * cpu_scores["Bleu_4"], 2)}
        report["gpu_fp32_same_captions_as_cpu"] = sum(cpu.get(k) == v for k, v in runs["fp32"].items())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
