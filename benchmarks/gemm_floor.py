"""How fast decoding and training could be on this machine: their matrix products alone.

Times, with one thread, every matrix-product shape that the paper-size Transformer runs in the
three jobs of ``benchmarks/decode.py`` (50 images x 50 regions x 2048-d, D=512, d_ff 2048, 3+3
layers, vocab 10,000), each on its own with the bias, and adds them up with their counts:

- ``greedy``: 17 decoder steps (16 words + the forced ``<eos>``) of 50 rows;
- ``beam``: beam 5, step 0 once per image (50 rows), then 16 steps of 250 rows; the memory's
  keys and values once per image, as catcap computes them;
- ``train_step``: one XE step on 50 captions (17 input tokens each: 850 decoder rows), every
  product forward *and* backward (the gradients of the input and of the weight; the feature
  projection's input needs none).

LayerNorms, the vocabulary softmax, beam bookkeeping, the optimizer and everything else come on
top, so no implementation with the same products can be faster than these sums on this machine;
``decode.py --floors`` prints each job's ratio to its floor, measured in the same run.

``--attention`` (and ``decode.py --floors``) also times the jobs' attention kernels alone, the
other part of the specified computation that is more than element-wise: every encoder
self-attention, every decoder step's self-attention over the keys/values so far (1..17
positions) and cross attention over the 50 regions (in beam search a group of 5 queries per
image, as catcap attends), forward and backward for the training step; one set of keys/values
per layer, so each step reads them from memory as decoding must. PyTorch's fused CPU kernel
(``scaled_dot_product_attention``) runs them. The sum of both is the ``products + attention``
floor. Prints one JSON line per shape and one with the totals.

The products run as catcap's Linear layers run them (``catcap.models.linear``): through
oneDNN where catcap picks it (a non-Intel CPU with AVX-512), else through PyTorch (MKL); the
decoding jobs' forward products from weights packed once into oneDNN's layout, as decoding
(eval mode, no gradients) reads them, the training step's from the plain weights.
Compare the two with the environment variable:

Usage: python benchmarks/gemm_floor.py [--repeats 30] [--jobs greedy beam train_step]
       CATCAP_CPU_GEMM=torch python benchmarks/gemm_floor.py     # PyTorch's own (MKL) products
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from catcap.config import load_config
from catcap.models.linear import Linear, cpu_gemm_backend
from catcap.training.experiment import ExperimentConfig
from workload import JOBS, PRESETS, B, N, T, V

STEPS, REGIONS, BEAM = T + 1, B * N, 5  # 16 words + the forced <eos> step


def shapes(job: str = "greedy") -> list[tuple[str, int, int, int, int, bool]]:
    """(what, rows, in, out, count, backward) of every product of one ``job`` of the
    paper-size Transformer; ``backward``: the product's gradients are computed too."""
    m = load_config(ExperimentConfig, PRESETS / "transformer.yaml").model
    feat, d, d_ff, layers = m.feature_dim, m.d_model, m.d_ff, m.encoder_layers
    if m.decoder_layers != layers:
        raise ValueError("the shape list below assumes as many decoder as encoder layers")
    train = job == "train_step"
    encoder = [
        ("feature projection", REGIONS, feat, d, 1),
        ("encoder q/k/v/out", REGIONS, d, d, 4 * layers),
        ("encoder FFN in", REGIONS, d, d_ff, layers),
        ("encoder FFN out", REGIONS, d_ff, d, layers),
        ("cross-attention keys/values, once", REGIONS, d, d, 2 * layers),
    ]
    if job == "greedy":
        passes = [(B, STEPS, "")]
    elif job == "beam":
        passes = [(B, 1, " (step 0)"), (B * BEAM, STEPS - 1, " (steps 1-16)")]
    elif train:
        passes = [(B * STEPS, 1, " (teacher forcing)")]
    else:
        raise ValueError(f"unknown job {job!r}: expected one of {', '.join(JOBS)}")
    decoder = []
    for rows, steps, note in passes:
        decoder += [
            ("decoder self q/k/v/out + cross q/out" + note, rows, d, d, 6 * layers * steps),
            ("decoder FFN in" + note, rows, d, d_ff, layers * steps),
            ("decoder FFN out" + note, rows, d_ff, d, layers * steps),
            ("vocabulary projection" + note, rows, d, V, steps),
        ]
    return [(what, rows, i, o, count, train) for what, rows, i, o, count in encoder + decoder]


def seconds(rows: int, fan_in: int, fan_out: int, repeats: int, backward: bool = False,
            input_grad: bool = True) -> float:
    """One product (with its backward products when ``backward``), seconds each."""
    layer = Linear(fan_in, fan_out).train(backward)  # eval: the packed weight decoding reads
    x = torch.randn(rows, fan_in)
    if backward:
        x.requires_grad_(input_grad)
        grad = torch.randn(rows, fan_out)

    def once():
        with torch.set_grad_enabled(backward):
            y = layer(x)
        if backward:
            y.backward(grad)

    once()
    start = time.perf_counter()
    for _ in range(repeats):
        once()
    return (time.perf_counter() - start) / repeats


def floor(job: str, repeats: int, log=None) -> tuple[float, float]:
    """(seconds, GFLOP) of all of ``job``'s matrix products, one thread (``log``: per shape)."""
    total = flops = 0.0
    for what, rows, fan_in, fan_out, count, backward in shapes(job):
        input_grad = what != "feature projection"
        each = seconds(rows, fan_in, fan_out, repeats, backward, input_grad)
        work = 2 * rows * fan_in * fan_out * ((2 if input_grad else 1) + 1 if backward else 1)
        total, flops = total + each * count, flops + work * count
        if log:
            log({"job": job, "shape": what, "rows": rows, "in": fan_in, "out": fan_out, "count": count,
                 "backward": backward, "ms_each": round(each * 1e3, 3),
                 "gflops_per_s": round(work / each / 1e9, 1), "s_total": round(each * count, 3)})
    return total, flops / 1e9


def attention_shapes(job: str) -> list[tuple[str, int, int, int, int, int, bool]]:
    """(what, batch, queries, keys, count, layers, causal) of every attention of one ``job``
    (heads H and d_k from the preset); ``count`` calls per layer."""
    if job not in JOBS:
        raise ValueError(f"unknown job {job!r}: expected one of {', '.join(JOBS)}")
    layers = load_config(ExperimentConfig, PRESETS / "transformer.yaml").model.decoder_layers
    rows = [("encoder self-attention", B, N, N, 1, layers, False)]
    if job == "train_step":
        return rows + [("decoder self-attention (causal)", B, STEPS, STEPS, 1, layers, True),
                       ("decoder cross attention", B, STEPS, N, 1, layers, False)]
    beams = [(B, 1, range(STEPS))] if job == "greedy" else [(B, 1, (0,)), (B * BEAM, BEAM, range(1, STEPS))]
    for hyps, group, steps in beams:
        for t in steps:
            rows.append((f"decoder self-attention, {t + 1} keys", hyps, 1, t + 1, 1, layers, False))
        rows.append((f"decoder cross attention, {group} queries per image", B, group, N, len(steps), layers, False))
    return rows


def attention_seconds(batch: int, queries: int, keys: int, layers: int, repeats: int,
                      backward: bool = False, causal: bool = False) -> float:
    """One fused attention call of (batch, H, queries, d_k) over (batch, H, keys, d_k), the
    ``layers`` calls cycling over their own keys/values (as a decoder's layers read theirs)."""
    m = load_config(ExperimentConfig, PRESETS / "transformer.yaml").model
    heads, d_k = m.num_heads, m.d_model // m.num_heads
    sets = [[torch.randn(batch, heads, n, d_k, requires_grad=backward) for n in (queries, keys, keys)]
            for _ in range(layers)]
    mask = None if causal else torch.ones(batch, 1, 1, keys, dtype=torch.bool)  # catcap passes a region mask

    def once(q, k, v):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        if backward:
            out.backward(torch.ones_like(out))

    for qkv in sets:
        once(*qkv)
    start = time.perf_counter()
    for _ in range(repeats):
        for qkv in sets:
            once(*qkv)
    return (time.perf_counter() - start) / (repeats * layers)


def attention_floor(job: str, repeats: int, log=None) -> float:
    """Seconds of all of ``job``'s attention kernels, one thread (``log``: per shape)."""
    total = 0.0
    for what, batch, queries, keys, count, layers, causal in attention_shapes(job):
        each = attention_seconds(batch, queries, keys, layers, repeats, job == "train_step", causal)
        total += each * count * layers
        if log:
            log({"job": job, "attention": what, "batch": batch, "queries": queries, "keys": keys,
                 "count": count * layers, "ms_each": round(each * 1e3, 3), "s_total": round(each * count * layers, 4)})
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--attention", action="store_true", help="also time the attention kernels alone")
    args = parser.parse_args()
    torch.set_num_threads(1)
    show = lambda row: print(json.dumps(row), flush=True)  # noqa: E731
    for job in args.jobs:
        total, gflop = floor(job, args.repeats, log=show)
        row = {"job": job, "matrix_products_s": round(total, 3), "gflop": round(gflop, 1)}
        if args.attention:
            att = attention_floor(job, max(3, args.repeats // 3), log=show)
            row.update(attention_s=round(att, 3), products_plus_attention_s=round(total + att, 3))
        show({**row, "threads": 1, "backend": cpu_gemm_backend()})


if __name__ == "__main__":
    main()
