"""`catcap caption DIR` as a pipeline: end-to-end images/s against each stage alone, and peak memory.

    .venv/bin/python benchmarks/pipeline.py --images 500            # the speed ratio (one process)
    .venv/bin/python benchmarks/pipeline.py --rss 1000,7000          # peak RSS, a fresh process per count
    python benchmarks/pipeline.py --device cuda --threads 1 --workers 4 --photos DIR --images 400

Speed (one process, one model load, the first N photos of ../shared/data/flickr8k/images by
name, the bundled zoo model, ``torch.get_num_threads()`` threads unless --threads):

  (a) read+encode alone: JPEG reading in --workers DataLoader processes + the image encoder,
      all T threads (``catcap.inference.pipeline.read_batches`` + ``Stages.encode``);
  (b) decode alone: beam search on the features (a) made, all T threads (``Stages.decode``);
  (c) the pipeline end to end (``catcap.inference.pipeline.caption_batches``): encoder thread and
      decoding thread share the T threads (``thread_shares``).

The target (issue 25): (c) >= 0.85 x min((a), (b)). With T > 1 the stages are also timed alone
with the threads each gets inside the pipeline (``thread_shares``: 1 + 1 for T = 2), and
``ratio_to_shares`` is (c) over the slower of those: how well the overlap works, as opposed to
``ratio``, which also counts that each stage alone could use every core. A first pass over 2 batches warms the page
cache and the kernels before the timed runs.

Memory (--rss): each count runs `caption_to_file` (what `catcap caption DIR --out F.jsonl`
runs) in a fresh subprocess on the first N photos and prints its own peak resident memory
(VmHWM of the main process; the JPEG workers are separate processes of fixed size).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

IMAGES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "flickr8k" / "images"


def _photos(n: int, folder: Path = IMAGES) -> list[str]:
    if not folder.is_dir():
        sys.exit(f"photos not found at {folder}; expected ../shared/data/flickr8k/images or --photos DIR")
    found = sorted(str(p) for p in folder.glob("*.jpg"))
    if len(found) < n:
        sys.exit(f"expected at least {n} photos in {folder}, found {len(found)}")
    return found[:n]


def _sync() -> None:
    """Wait for the GPU's queued work before reading a clock (a no-op when CUDA was never used)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _job(photos: list[str], beam: int, max_len: int, device: str = "cpu"):
    from catcap import api

    return api.prepare_caption(None, photos, num_beams=beam, max_length=max_len, device=device)


def _bar(n: int, desc: str):
    from catcap.progress import progress_bar

    return progress_bar(total=n, desc=desc, unit="img")


def stage_encode(job, batch_size: int, workers: int, threads: int) -> tuple[float, list]:
    """(a): images/s of reading + encoding alone; returns the encoded batches for (b)."""
    from catcap.inference.pipeline import Stages, read_batches

    torch.set_num_threads(threads)
    stages, encoded, bar = Stages(job.cap, generation=job.generation), [], _bar(len(job.items), "read+encode")
    t0 = time.perf_counter()
    for batch in read_batches(job.items, job.is_file, job.cap.image_encoder.input_size, batch_size=batch_size,
                              workers=workers):
        encoded.append(stages.encode(job.items, batch))
        bar.update(len(batch))
    _sync()
    seconds = time.perf_counter() - t0
    bar.close()
    return len(job.items) / seconds, encoded


def stage_decode(job, encoded: list, threads: int) -> float:
    """(b): images/s of beam search on ready features alone."""
    from catcap.inference.pipeline import Stages

    torch.set_num_threads(threads)
    stages, bar = Stages(job.cap, generation=job.generation), _bar(len(job.items), "decode")
    t0 = time.perf_counter()
    for batch in encoded:
        stages.decode(batch)
        bar.update(len(batch.items))
    _sync()
    seconds = time.perf_counter() - t0
    bar.close()
    return len(job.items) / seconds


def end_to_end(job, batch_size: int, workers: int, threads: int) -> tuple[float, list]:
    """(c): images/s of the pipeline; returns the captions (checked against (b)'s path)."""
    from catcap.inference.caption_run import caption_stream

    t0 = time.perf_counter()
    out = list(caption_stream(job, batch_size=batch_size, workers=workers, threads=threads))
    _sync()
    return len(job.items) / (time.perf_counter() - t0), out


def speed(args) -> dict:
    photos = _photos(args.images, Path(args.photos) if args.photos else IMAGES)
    threads = args.threads or torch.get_num_threads()
    job = _job(photos, args.beam, args.max_len, args.device)
    warm = _job(photos[:2 * args.batch_size], args.beam, args.max_len, args.device)
    end_to_end(warm, args.batch_size, args.workers, threads)
    a, encoded = stage_encode(job, args.batch_size, args.workers, threads)
    b = stage_decode(job, encoded, threads)
    del encoded
    shares = {}
    if threads > 1:  # each stage alone with the threads the pipeline gives it (thread_shares)
        from catcap.inference.pipeline import thread_shares

        enc_threads, dec_threads = thread_shares(threads)
        a_share, encoded = stage_encode(job, args.batch_size, args.workers, enc_threads)
        b_share = stage_decode(job, encoded, dec_threads)
        del encoded
        shares = {"encoder_threads": enc_threads, "decoder_threads": dec_threads,
                  "read_encode_share_img_s": round(a_share, 2), "decode_share_img_s": round(b_share, 2)}
    torch.set_num_threads(threads)
    c, captions = end_to_end(job, args.batch_size, args.workers, threads)
    plain = [t for batch in job.batches(batch_size=args.batch_size, pipelined=False) for t in batch] \
        if args.check else None
    return {"photos": len(photos), "device": args.device, "threads": threads, "workers": args.workers, "batch_size": args.batch_size,
            "beam": args.beam, "max_len": args.max_len, "read_encode_img_s": round(a, 2), "decode_img_s": round(b, 2),
            "pipeline_img_s": round(c, 2), "ratio": round(c / min(a, b), 3), **shares,
            "ratio_to_shares": round(c / min(shares["read_encode_share_img_s"], shares["decode_share_img_s"]), 3)
            if shares else None,
            "same_as_unpipelined": None if plain is None else plain == captions}


def rss_child(args) -> dict:
    """One count: caption_to_file on the first N photos; this process's peak RSS."""
    from catcap.inference.caption_run import caption_to_file

    job = _job(_photos(args.rss_child), args.beam, args.max_len)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        result = caption_to_file(job, Path(tmp) / "captions.jsonl", batch_size=args.batch_size, workers=args.workers)
        seconds = time.perf_counter() - t0
    return {"photos": args.rss_child, "captioned": result.captioned, "seconds": round(seconds, 1),
            "img_s": round(result.captioned / seconds, 2), "peak_rss_mib": round(_vm_hwm_mib(), 1)}


def _vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss(args) -> list[dict]:
    rows = []
    for n in [int(x) for x in args.rss.split(",")]:
        cmd = [sys.executable, __file__, "--rss-child", str(n), "--beam", str(args.beam), "--max-len",
               str(args.max_len), "--batch-size", str(args.batch_size), "--workers", str(args.workers)]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    base = rows[0]["peak_rss_mib"]
    for row in rows:
        row["vs_first"] = round(row["peak_rss_mib"] / base, 3)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=500, help="photos for the speed run (default 500)")
    parser.add_argument("--rss", metavar="N,M,..", help="peak RSS runs instead: one fresh process per photo count")
    parser.add_argument("--rss-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help="intra-op threads T (default torch.get_num_threads())")
    parser.add_argument("--workers", type=int, default=2, help="JPEG reading processes (default 2)")
    parser.add_argument("--batch-size", type=int, default=16, help="images per batch (default 16, as catcap caption)")
    parser.add_argument("--beam", type=int, default=3, help="beam size (default 3, as catcap caption)")
    parser.add_argument("--max-len", type=int, default=20, help="most words (default 20, as catcap caption)")
    parser.add_argument("--check", action="store_true", help="also run the one-thread path and compare captions")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the encoder and decoder run (default cpu; cuda: every clock read after "
                             "torch.cuda.synchronize())")
    parser.add_argument("--photos", help="folder of .jpg photos (default ../shared/data/flickr8k/images)")
    args = parser.parse_args()
    if args.rss_child:
        print(json.dumps(rss_child(args)))
    elif args.rss:
        print(json.dumps(rss(args), indent=1))
    else:
        print(json.dumps(speed(args), indent=1))


if __name__ == "__main__":
    main()
