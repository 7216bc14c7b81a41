"""Old against new decoding code, interleaved in one run: two catcap source trees, same jobs.

decode.py's paper-size jobs (``Bench``: random weights, vocab 10,000, 50 images x 50 regions x
2048-d, 16 steps with ``<eos>`` suppressed; greedy and beam 5) run in two worker processes, one
importing catcap from OLD_SRC and one from NEW_SRC (each builds the same models from the same
seed). The driver asks them in turn, alternating which goes first (ABBA), so drifting machine
load hits both alike; each worker also returns a digest of the tokens and scores it decoded,
and the run stops if old and new ever differ. Prints one JSON line per model and job: medians
of old and new, and the median over repeats of the paired ratio new / old (what the 1.02 bar of
issue 38 is about), for wall time (``*_s``, ``paired_ratio``) and for the CPU time of the
worker process (``*_cpu_s``, ``paired_cpu_ratio``: with one thread on a shared machine it leaves
out the time the worker waited for a core, so it is the steadier of the two there).

``--static``: the new side decodes with ``generate(..., static=True)`` (static decoding, issue
39: no early stop, so with ``<eos>`` suppressed the same 17 steps); the old side as it defaults.

Usage: python benchmarks/generate_ab.py OLD_SRC NEW_SRC [--models transformer cat] [--repeats 20]
           [--jobs greedy beam] [--threads 1] [--malloc catcap] [--static]
e.g.:  git -C /path/to/catcap archive main src | tar -x -C /tmp/catcap_main
       python benchmarks/generate_ab.py /tmp/catcap_main/src src --models transformer cat m2 updown_caca
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(models: list[str], threads: int, malloc: str, static: bool = False) -> None:
    """Build the benches, then answer ``model job`` lines with ``seconds digest``."""
    import torch

    sys.path.insert(0, str(HERE))
    from decode import Bench
    from workload import B, F, N, T, V
    from catcap.decoding import GenerationConfig, beam_search, generate, greedy
    from catcap.malloc import keep_freed_memory

    keep_freed_memory(malloc)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    feats, mask = torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    benches = {name: Bench(name, (feats, mask, captions), torch.device("cpu")) for name in models}
    jobs = {"greedy": lambda b: greedy(b.model.eval(), b.feats, b.mask, max_len=T, processors=b.no_eos),
            "beam": lambda b: beam_search(b.model.eval(), b.feats, b.mask, beam_size=5, max_len=T, processors=b.no_eos)}
    if static:
        configs = {"greedy": GenerationConfig(num_beams=1, max_length=T), "beam": GenerationConfig(num_beams=5, max_length=T)}
        jobs = {job: (lambda b, c=c: generate(b.model.eval(), b.feats, b.mask, c, processors=b.no_eos, static=True))
                for job, c in configs.items()}
    print("ready", flush=True)
    for line in sys.stdin:
        name, job = line.split()
        with torch.no_grad():
            start, cpu = time.perf_counter(), time.process_time()
            out = jobs[job](benches[name])
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        digest = hashlib.sha256(out.tokens.numpy().tobytes() + out.scores.numpy().tobytes()).hexdigest()[:16]
        print(f"{seconds} {cpu} {digest}", flush=True)


def start(src: str, args, static: bool = False) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", "--models", *args.models, "--threads",
                             str(args.threads), "--malloc", args.malloc, *(["--static"] if static else [])],
                            env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def ask(proc: subprocess.Popen, name: str, job: str) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds, digest of the decoded tokens and scores) of one job."""
    proc.stdin.write(f"{name} {job}\n")
    proc.stdin.flush()
    seconds, cpu, digest = proc.stdout.readline().split()
    return float(seconds), float(cpu), digest


def summary(times: list[float], base: list[float]) -> tuple[float, float, float, list[float]]:
    """Medians of new and old, the median paired ratio new / old and its quartiles."""
    ratios = [n / o for n, o in zip(times, base)]
    return (round(statistics.median(base), 4), round(statistics.median(times), 4), round(statistics.median(ratios), 4),
            [round(q, 4) for q in statistics.quantiles(ratios, n=4)[::2]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", nargs="?")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--models", nargs="+", default=["transformer", "cat"])
    parser.add_argument("--jobs", nargs="+", default=["greedy", "beam"], choices=["greedy", "beam"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--malloc", default="catcap", choices=["catcap", "system"])
    parser.add_argument("--static", action="store_true", help="the new side decodes with generate(static=True)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.models, args.threads, args.malloc, args.static)
    sides = {"old": start(args.old, args), "new": start(args.new, args, args.static)}
    for name in args.models:
        for job in args.jobs:
            digests = {side: ask(sides[side], name, job)[2] for side in sides}  # warm-up, and the same output
            if digests["old"] != digests["new"]:
                raise SystemExit(f"{name} {job}: old and new decode different tokens or scores")
            wall: dict[str, list[float]] = {"old": [], "new": []}
            cpu: dict[str, list[float]] = {"old": [], "new": []}
            for r in range(args.repeats):
                for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                    seconds, cpu_seconds, again = ask(sides[side], name, job)
                    if again != digests["old"]:
                        raise SystemExit(f"{name} {job}: {side} decoded other tokens or scores in repeat {r}")
                    wall[side].append(seconds)
                    cpu[side].append(cpu_seconds)
            old_s, new_s, ratio, quartiles = summary(wall["new"], wall["old"])
            old_cpu, new_cpu, cpu_ratio, cpu_quartiles = summary(cpu["new"], cpu["old"])
            print(json.dumps({"model": name, "job": job, "threads": args.threads, "repeats": args.repeats,
                              "old_s": old_s, "new_s": new_s, "paired_ratio": ratio, "ratio_q1_q3": quartiles,
                              "old_cpu_s": old_cpu, "new_cpu_s": new_cpu, "paired_cpu_ratio": cpu_ratio,
                              "cpu_ratio_q1_q3": cpu_quartiles, "same_tokens": True, "new_static": args.static}),
                  flush=True)
    for proc in sides.values():
        proc.stdin.close()
        proc.wait()


if __name__ == "__main__":
    main()
