"""One meshed (M2) cross-attention decoding step timed alone, by history length (issue 17).

At the paper size (D=512, 8 heads, 3 encoder levels, 50 images x 50 regions, beam 5 so 250
rows, one query per row), random weights, eval mode, one thread: the vanilla meshed cross
attention's ``step``, CACA's ``step`` with t history entries already in its memory, and the
beam reorder of that memory (``index_select`` of its rows), for each placement of the history
(``per_level``: three 8-head memories, ``gated``: one). Medians of ``--calls`` calls, in ms
and in units of one 250 x 512 x 512 ``torch.nn.Linear`` on the same rows.

Usage: taskset -c 0 python benchmarks/studies/cross_step.py [--lengths 1 8 16] [--calls 60]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.cross.mix import MeshedGates
from catcap.models.cross.transformer import TransformerCrossAttention

D, H, LEVELS, B, G, N = 512, 8, 3, 50, 5, 50


def median_ms(fn, calls: int) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1, 8, 16], help="history entries t")
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    mask, levels = torch.ones(B, N, dtype=torch.bool), torch.randn(B, LEVELS, N, D)
    rows, q = B * G, torch.randn(B * G, 1, D)
    linear, x = torch.nn.Linear(D, D), torch.randn(B * G, D)
    vanilla = TransformerCrossAttention(D, H, 0.1, mix=MeshedGates(D, LEVELS)).eval()
    prepared_vanilla = vanilla.prepare(levels)
    for placement in ("per_level", "gated"):
        caca = TransformerCrossAttention(D, H, 0.1, mix=MeshedGates(D, LEVELS),
                                         history=ContextAssist(placement=placement)).eval()
        prepared = caca.prepare(levels)
        for t in args.lengths:
            memory = HistoricalContextMemory()
            for _ in range(t - 1):
                _, memory, _ = caca.step(q, prepared, mask, memory, G)
            _, grown, _ = caca.step(q, prepared, mask, memory, G)
            index = torch.randperm(rows)
            unit = median_ms(lambda: linear(x), args.calls)
            times = {"vanilla": median_ms(lambda: vanilla.step(q, prepared_vanilla, mask, None, G), args.calls),
                     "caca": median_ms(lambda: caca.step(q, prepared, mask, memory, G), args.calls),
                     "reorder": median_ms(lambda: grown.index_select(index), args.calls)}
            cells = " | ".join(f"{k} {v:.2f} ms ({v / unit:.1f})" for k, v in times.items())
            print(f"{placement:9s} t={t:2d} | linear {unit:.3f} ms | {cells}", flush=True)


if __name__ == "__main__":
    main()
