"""Floating-point work of the jobs in ``benchmarks/decode.py``, counted, not timed (issue 4).

Runs greedy, beam-5 and one XE training step of each model once under PyTorch's
``FlopCounterMode`` (matrix products and attention; element-wise ops are not counted) on the
same inputs as ``decode.py`` (paper size, 50 images, 16 steps, ``<eos>`` suppressed) and prints
one JSON line per model with GFLOP per job and, for every model but the first, the ratio to the
first. The counts are exact and machine-independent: on a CPU whose matrix products already
run near peak, a model's time ratio cannot go much below its FLOP ratio, whatever the code does
around them.

Linear layers are counted through PyTorch's own product (``CATCAP_CPU_GEMM=torch`` is set
before catcap is imported): catcap's oneDNN path calls a private op that the counter does not
see, and the arithmetic is the same either way.

Usage: python benchmarks/flops.py [--models transformer cat lightcat m2 m2_caca m2_light_caca]
       python benchmarks/flops.py --models transformer updown updown_caca updown_light_caca

The soft attention of the LSTM decoders spends much of its time in element-wise work that is
not counted (``tanh(W_v v + W_h h)`` over every region, then one product with ``w``): their
counted floor is the products alone.
"""

from __future__ import annotations

import argparse
import json
import os

os.environ["CATCAP_CPU_GEMM"] = "torch"  # before catcap decides its backend (see the docstring)

import torch
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula, sdpa_flop_count

from decode import Bench
from workload import JOBS, B, F, N, T, V


@register_flop_formula(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu)
def _cpu_flash_attention(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """PyTorch counts its GPU attention kernels but not the CPU one; same formula."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def count(bench: Bench, job: str) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        getattr(bench, job)()
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["transformer", "cat", "lightcat"],
                        help="presets (configs/models/NAME.yaml); ratios are to the first, e.g. "
                             "--models m2 m2_caca m2_light_caca for M2 + (Light)CACA against M2")
    args = parser.parse_args()
    torch.manual_seed(0)
    feats, mask = torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    captions[:, 0], captions[:, -1] = 1, 2
    first = None
    for name in args.models:
        bench = Bench(name, (feats, mask, captions), torch.device("cpu"))
        flops = {job: count(bench, job) for job in JOBS}
        first = first or flops
        result = {"model": name}
        for job in JOBS:
            result[f"{job}_gflop"] = round(flops[job] / 1e9, 2)
            if flops is not first:
                result[f"{job}_ratio"] = round(flops[job] / first[job], 3)
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
