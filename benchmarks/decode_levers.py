"""Decoding levers of issue 25, each timed on and off in one run (paired, interleaved).

Paper-size Transformer of ``decode.py`` (50 images x 50 regions x 2048-d, 16 steps, ``<eos>``
suppressed), one thread. For every lever, each repeat times the job with the lever off and on,
in alternating order, and the median of the paired ratios on/off is printed (drifting load
affects it least), with the medians of both times.

Levers (the "off" side restores what catcap did before, by patching, in this process only):
  few_queries   attention of at most 8 queries per head as three operations, not PyTorch's
                fused CPU kernel (tried 2026-11-26 and not kept: 6-8% slower in place although
                15-45% faster alone; "on" patches ``attention.attend`` to do it)
  allowed_check the "every token forbidden" check as one max over the vocabulary instead of
                ``isneginf(...).all(dim=1)`` (``catcap.decoding.processors.check_some_allowed``)
  bf16_weights  the weights and features in bf16 (``catcap evaluate --dtype bf16``) against fp32
  two_topk      beam search's candidates by two top-k's (each beam's 2K best tokens, then the
                image's 2K best of those) instead of one top-k over all K x V sums, which first
                writes the (B*K, V) sums (tried 2026-11-26, 0.996: not kept; "on" patches
                ``catcap.decoding.beam._candidates``; beam only)
  prealloc_kv   the self-attention cache preallocated for every step and written in place (the
                attention reads a narrowed view) instead of a new contiguous (B, H, t+1, d_k)
                copy per step (``KeyValue.cat``); greedy only: beam search reorders the cache
                every step, a copy either way (tried 2026-11-26, 1.032: not kept; "on" patches it in)

Usage: python benchmarks/decode_levers.py [--repeats 7] [--jobs greedy beam] [--levers ...]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time

import torch

import catcap.decoding.beam as beam_module
import catcap.decoding.greedy as greedy_module
import catcap.decoding.processors as processors
import catcap.models.attention as attention
from catcap.decoding import beam_search, greedy
from decode import B, F, N, T, V, Bench

LEVERS = ("few_queries", "allowed_check", "bf16_weights", "two_topk", "prealloc_kv")
ONLY = {"two_topk": "beam", "prealloc_kv": "greedy"}  # the job a lever applies to


def _old_check(log_probs, step):
    if bool(torch.isneginf(log_probs).all(dim=1).any()):
        raise ValueError("every token forbidden")


def _two_topk(sums, scores):
    """The tried lever: each beam's 2K best tokens, then the image's 2K best of those K x 2K
    (the same candidates as one top-k over the K x V sums, without writing those sums)."""
    b, k = sums.shape
    width = min(2 * k, scores.shape[1])
    top, tokens = scores.topk(width, dim=1)
    cand_sums, pos = (sums.view(-1, 1) + top).view(b, -1).topk(2 * k, dim=1)
    return cand_sums, torch.div(pos, width, rounding_mode="floor"), tokens.view(b, -1).gather(1, pos)


@contextlib.contextmanager
def two_topk_on():
    plain = beam_module._candidates
    beam_module._candidates = _two_topk
    try:
        yield
    finally:
        beam_module._candidates = plain


_plain_cat = attention.KeyValue.cat


def _prealloc_cat(self, other):
    """KeyValue.cat into a buffer of T + 1 positions kept on the result (``_buf``), in place."""
    t, n = self.length, other.length
    buf = getattr(self, "_buf", None)
    if buf is None or buf[0].shape[2] < t + n:
        shape = (*self.k.shape[:2], T + 1, self.k.shape[3])
        buf = (self.k.new_empty(shape), self.v.new_empty(shape))
        buf[0][:, :, :t], buf[1][:, :, :t] = self.k, self.v
    buf[0][:, :, t:t + n], buf[1][:, :, t:t + n] = other.k, other.v
    out = attention.KeyValue(buf[0][:, :, :t + n], buf[1][:, :, :t + n])
    out._buf = buf
    return out


@contextlib.contextmanager
def prealloc_on():
    attention.KeyValue.cat = _prealloc_cat
    try:
        yield
    finally:
        attention.KeyValue.cat = _plain_cat


_fused_attend = attention.attend


def _few_queries_attend(q, k, v, mask, dropout=0.0, need_weights=False, explicit=False):
    return _fused_attend(q, k, v, mask, dropout, need_weights, explicit or q.shape[-2] <= 8)


@contextlib.contextmanager
def few_queries_on():
    """The tried lever: attention of <= 8 queries per head as three operations."""
    import catcap.models.cross.vanilla as vanilla

    modules = [m for m in (attention, vanilla) if getattr(m, "attend", None) is _fused_attend]
    for m in modules:
        m.attend = _few_queries_attend
    try:
        yield
    finally:
        for m in modules:
            m.attend = _fused_attend


@contextlib.contextmanager
def lever_off(name: str):
    """Patch catcap back to its behaviour without lever ``name`` (bf16_weights: nothing)."""
    saved = []
    if name == "allowed_check":
        for module in (processors, greedy_module):
            if hasattr(module, "check_some_allowed"):
                saved.append((module, "check_some_allowed", module.check_some_allowed))
                module.check_some_allowed = _old_check
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


TRIED = {"few_queries": few_queries_on, "two_topk": two_topk_on, "prealloc_kv": prealloc_on}  # "on" patches them in


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--jobs", nargs="+", default=["greedy", "beam"], choices=["greedy", "beam"])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    feats, mask = torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    bench = Bench("transformer", (feats, mask, captions), torch.device("cpu"))
    model = bench.model.eval()
    narrow = copy.deepcopy(model).to(torch.bfloat16).eval()
    fns = {"greedy": (greedy, {}), "beam": (beam_search, {"beam_size": 5})}

    def run(job: str, lever: str, on: bool) -> float:
        fn, kw = fns[job]
        use_narrow = lever == "bf16_weights" and on
        m, x = (narrow, feats.to(torch.bfloat16)) if use_narrow else (model, feats)
        if lever in TRIED:
            ctx = TRIED[lever]() if on else contextlib.nullcontext()
        else:
            ctx = contextlib.nullcontext() if on or lever == "bf16_weights" else lever_off(lever)
        with ctx, torch.no_grad():
            start = time.perf_counter()
            fn(m, x, mask, max_len=T, processors=bench.no_eos, **kw)
            return time.perf_counter() - start

    for job in args.jobs:
        for lever in args.levers:
            if ONLY.get(lever, job) != job:
                continue
            run(job, lever, True), run(job, lever, False)  # warm-up
            on, off = [], []
            for r in range(args.repeats):
                order = (True, False) if r % 2 == 0 else (False, True)
                for state in order:
                    (on if state else off).append(run(job, lever, state))
            ratio = statistics.median(a / b for a, b in zip(on, off))
            print(json.dumps({"job": job, "lever": lever, "on_s": round(statistics.median(on), 4),
                              "off_s": round(statistics.median(off), 4), "on_over_off": round(ratio, 3),
                              "repeats": args.repeats, "threads": 1}), flush=True)


if __name__ == "__main__":
    main()
