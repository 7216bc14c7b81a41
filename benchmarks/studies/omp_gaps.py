"""How often OpenMP's idle threads would have to be woken: parallel regions per job and the CPU
time between them (issue 41; needs gcc and Linux).

An idle OpenMP thread spins ``GOMP_SPINCOUNT`` rounds, then sleeps; a region that starts after a
longer pause has to wake it first. This counts, for the jobs of benchmarks/contention.py, the
parallel regions per run and how many of them start after a pause of at least 32 us ... 8 ms,
pauses measured in the calling thread's CPU time (the serial work between two regions), so the
count does not depend on what else runs on the machine. It also times one spin round
(``pause`` + a load, as libgomp's ``do_spin``) on this CPU, which turns spin counts into times.

How: a small shared library, compiled here with gcc and preloaded (``LD_PRELOAD``) into one
process per job, wraps libgomp's ``GOMP_parallel`` (every region of PyTorch, oneDNN and MKL
starts there) and keeps the histogram. PyTorch's defaults run in that process.

Usage: python benchmarks/studies/omp_gaps.py [--jobs greedy beam xe_step demo_train] [--runs 3]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

WRAPPER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <time.h>
typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
static parallel_fn real_parallel;
static __thread double last_end = -1;  /* per calling thread: CPU time at the end of its last region */
static long buckets[40], regions;      /* bucket 0: pause < 1 us; bucket b: [2^(b-1), 2^b) us */
static double cpu_ns(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags) {
    if (!real_parallel) real_parallel = (parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
    double start = cpu_ns();
    if (last_end >= 0) {
        double pause = (start - last_end) / 1000.0; int b = 0;
        while (pause >= 1.0 && b < 39) { pause /= 2; b++; }
        __atomic_add_fetch(&buckets[b], 1, __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&regions, 1, __ATOMIC_RELAXED);
    real_parallel(fn, data, threads, flags);
    last_end = cpu_ns();
}
void gaps_reset(void) { memset(buckets, 0, sizeof buckets); regions = 0; }
long gaps_regions(void) { return regions; }
long gaps_bucket(int b) { return buckets[b]; }
"""

SPIN_ROUND = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
    static volatile int flag = 0; struct timespec a, b; long n = 20000000, i;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (i = 0; i < n; i++) { if (__atomic_load_n(&flag, __ATOMIC_RELAXED)) break; __asm volatile("rep; nop" ::: "memory"); }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""

THRESHOLDS_US = (32, 64, 128, 256, 1024, 8192)


def compile_tools(folder: Path) -> tuple[Path, float]:
    """The wrapper library, and the nanoseconds of one spin round on this CPU."""
    (folder / "gaps.c").write_text(WRAPPER)
    (folder / "spin.c").write_text(SPIN_ROUND)
    library = folder / "gaps.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(folder / "gaps.c"), "-ldl"], check=True)
    subprocess.run(["gcc", "-O2", "-o", str(folder / "spin"), str(folder / "spin.c")], check=True)
    rounds = [float(subprocess.run([str(folder / "spin")], capture_output=True, text=True, check=True).stdout)
              for _ in range(3)]
    return library, min(rounds)


def count(job: str, runs: int, work: str, library: str) -> None:
    """In the preloaded process: build ``job`` (contention.py's, warmed up), run it ``runs``
    times, print one line."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import contention_jobs

    gaps = ctypes.CDLL(library)
    gaps.gaps_bucket.restype = gaps.gaps_regions.restype = ctypes.c_long
    args = types.SimpleNamespace(jobs=[job], work=work, demo_steps=10, photos=32, images_per_batch=0)
    run = contention_jobs.build_jobs(args)[job]
    gaps.gaps_reset()
    for _ in range(runs):
        run()
    buckets = [gaps.gaps_bucket(b) / runs for b in range(40)]
    above = {us: round(sum(c for b, c in enumerate(buckets) if b >= 1 and 2 ** (b - 1) >= us)) for us in THRESHOLDS_US}
    size = " (10 steps)" if job == "demo_train" else " (32 photos)" if job == "extract" else ""
    print(f"{job}{size}: {gaps.gaps_regions() / runs:.0f} regions per run; starting after a pause of at least "
          + ", ".join(f"{us} us: {n}" for us, n in above.items()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", nargs="+", default=["greedy", "beam", "xe_step", "demo_train"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", nargs=3, metavar=("JOB", "WORK", "LIBRARY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count:
        count(args.count[0], args.runs, args.count[1], args.count[2])
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import contention_jobs

    with tempfile.TemporaryDirectory(prefix="catcap-omp-gaps-") as work:
        library, spin_ns = compile_tools(Path(work))
        print(f"one spin round: {spin_ns:.1f} ns, so GOMP_SPINCOUNT 1000 = {spin_ns:.0f} us, 3000 = "
              f"{3 * spin_ns:.0f} us, 10000 = {10 * spin_ns:.0f} us, 300000 (libgomp's default) = "
              f"{300 * spin_ns / 1000:.1f} ms", flush=True)
        if "demo_train" in args.jobs:
            contention_jobs.make_world(Path(work), num_train=120)
        env = dict(os.environ, LD_PRELOAD=str(library), CATCAP_THREADS="torch",
                   PYTHONPATH=contention_jobs.src_pythonpath())
        for job in args.jobs:
            subprocess.run([sys.executable, __file__, "--runs", str(args.runs), "--count", job, work, str(library)],
                           check=True, env=env)


if __name__ == "__main__":
    main()
