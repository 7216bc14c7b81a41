"""How fast greedy decoding could be on this machine: its matrix products alone (issue 3).

Times, with one thread, every matrix-product shape the paper-size Transformer's greedy decode
of ``benchmarks/decode.py`` runs (50 images x 50 regions x 2048-d, 17 steps, D=512, d_ff 2048,
3+3 layers, vocab 10,000), each on its own with the bias, and adds them up with their counts.
Attention products, LayerNorms and everything else come on top, so a greedy decode cannot be
faster than this sum on this machine; the difference to ``decode.py``'s ``greedy_s`` is
what all other work costs. Prints one JSON line per shape and one with the total.

The products run as catcap's Linear layers run them (``catcap.models.linear``): through
oneDNN where catcap picks it (a non-Intel CPU with AVX-512), else through PyTorch (MKL).
Compare the two with the environment variable:

Usage: python benchmarks/gemm_floor.py [--repeats 30]
       CATCAP_CPU_GEMM=torch python benchmarks/gemm_floor.py     # PyTorch's own (MKL) products
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from catcap.config import load_config
from catcap.models.linear import cpu_gemm_backend, linear
from catcap.training.experiment import ExperimentConfig
from decode import PRESETS, B, N, T, V

STEPS, REGIONS = T + 1, B * N  # 16 words + the forced <eos> step


def shapes() -> list[tuple[str, int, int, int, int]]:
    """(what, rows, in, out, count) for one greedy decode of the paper-size Transformer."""
    m = load_config(ExperimentConfig, PRESETS / "transformer.yaml").model
    feat, d, d_ff, layers = m.feature_dim, m.d_model, m.d_ff, m.encoder_layers
    if m.decoder_layers != layers:
        raise ValueError("the shape list below assumes as many decoder as encoder layers")
    return [
        ("feature projection", REGIONS, feat, d, 1),
        ("encoder q/k/v/out", REGIONS, d, d, 4 * layers),
        ("encoder FFN in", REGIONS, d, d_ff, layers),
        ("encoder FFN out", REGIONS, d_ff, d, layers),
        ("cross-attention keys/values, once", REGIONS, d, d, 2 * layers),
        ("decoder self q/k/v/out + cross q/out", B, d, d, 6 * layers * STEPS),
        ("decoder FFN in", B, d, d_ff, layers * STEPS),
        ("decoder FFN out", B, d_ff, d, layers * STEPS),
        ("vocabulary projection", B, d, V, STEPS),
    ]


def seconds(rows: int, fan_in: int, fan_out: int, repeats: int) -> float:
    x, w, b = torch.randn(rows, fan_in), torch.randn(fan_out, fan_in), torch.randn(fan_out)
    linear(x, w, b)
    start = time.perf_counter()
    for _ in range(repeats):
        linear(x, w, b)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    total = flops = 0.0
    for what, rows, fan_in, fan_out, count in shapes():
        each = seconds(rows, fan_in, fan_out, args.repeats)
        work = 2 * rows * fan_in * fan_out
        total, flops = total + each * count, flops + work * count
        print(json.dumps({"shape": what, "rows": rows, "in": fan_in, "out": fan_out, "count": count,
                          "ms_each": round(each * 1e3, 3), "gflops_per_s": round(work / each / 1e9, 1),
                          "s_total": round(each * count, 3)}), flush=True)
    print(json.dumps({"greedy_matrix_products_s": round(total, 3), "gflop": round(flops / 1e9, 1),
                      "threads": 1, "backend": cpu_gemm_backend()}), flush=True)


if __name__ == "__main__":
    main()
