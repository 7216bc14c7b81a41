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
  inplace_memory the decoding memories (self-attention caches, CACA's history) in time-major
                buffers written in place, reorders gathering into a spare pair
                (``catcap.models.cross.memory``; kept 2026-11-26 night), against a grown copy per
                step and a reordered copy per reorder ("off" patches ``KeyValueMemory.appended``)
  packed_weights the Linear layers' weights packed once into oneDNN's blocked layout in eval mode
                (``catcap.models.linear.Linear.packed_weight``), against oneDNN reading the plain
                (out, in) weight at every call ("off" patches ``Linear.forward``)
  fused_qkv     the decoder's self-attention queries, keys and values as one (D, 3D) product per
                layer and step instead of three (D, D) ones (tried 2026-11-27, not kept; "on"
                patches ``DecoderLayer.step``)
  compile_ffn   each decoder layer's FFN block (LayerNorm, FFN, residual add) compiled by
                ``torch.compile`` (Inductor, static shapes; TORCHINDUCTOR_FREEZING=1 freezes the
                weights) in every step (tried 2026-11-27, not kept). The whole step has no static
                shape: its self-attention reads one more key per step
  inference_mode decoding under ``torch.inference_mode()`` instead of ``torch.no_grad()`` (less
                autograd bookkeeping per op; tried 2026-11-27, not kept: tensors made under it
                cannot be saved for backward later, as SCST's decodes are)
  masked_sums   beam search's rules masking the beams' summed scores in place (kept 2026-11-26
                night), against each rule copying the (B*K, V) log-probs before the sums are
                added ("off" patches ``catcap.decoding.beam._totals``); beam only

Two levers of earlier runs were removed with the code they patched (results in
benchmarks/results/decode.md): ``two_topk`` (0.996, not kept) and ``prealloc_kv`` (a
(B, H, capacity, d_k) cache read through a narrowed view: 1.032, not kept; ``inplace_memory``
is its time-major successor).

Usage: python benchmarks/studies/decode_levers.py [--repeats 7] [--jobs greedy beam] [--levers ...]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import catcap.decoding.beam as beam_module
import catcap.decoding.greedy as greedy_module
import catcap.decoding.processors as processors
import catcap.models.attention as attention
import catcap.models.cross.memory as memory
import catcap.models.linear as linear_module
from catcap.decoding import beam_search, greedy
from catcap.malloc import keep_freed_memory
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: decode.py, workload.py
from decode import Bench, add_malloc_argument  # noqa: E402
from workload import B, F, N, T, V  # noqa: E402

LEVERS = ("few_queries", "allowed_check", "bf16_weights", "inplace_memory", "masked_sums", "packed_weights", "fused_qkv",
          "compile_ffn", "inference_mode")
ONLY = {"masked_sums": "beam"}  # the job a lever applies to


def _old_check(log_probs, step):
    if bool(torch.isneginf(log_probs).all(dim=1).any()):
        raise ValueError("every token forbidden")


def _copied_appended(self, entry):
    """KeyValueMemory.appended as before the in-place buffers: a grown copy per step."""
    keys = self._keys
    return type(self)(entry.contiguous() if keys is None else keys.cat(entry))


def _copied_totals(sums, log_probs, processors_, history, step, last, eos_id):
    """beam._totals as before: every rule copies the log-probs, then the sums are added."""
    scores = processors.apply_processors(processors_, log_probs, history, step)
    if last:
        scores = processors.force_token(scores, torch.ones_like(scores[:, 0], dtype=torch.bool), eos_id,
                                        log_probs[:, eos_id])
    return sums.view(-1, 1) + scores


def _plain_forward(self, x):
    """Linear.forward as before the packed weights: oneDNN reads the (out, in) weight each call."""
    return linear_module.linear(x, self.weight, self.bias)


_fused_attend = attention.attend


def _few_queries_attend(q, k, v, mask, dropout=0.0, need_weights=False, explicit=False):
    return _fused_attend(q, k, v, mask, dropout, need_weights, explicit or q.shape[-2] <= 8)


@contextlib.contextmanager
def few_queries_on():
    """The tried lever: attention of <= 8 queries per head as three operations."""
    import catcap.models.cross.transformer as cross

    modules = [m for m in (attention, cross) if getattr(m, "attend", None) is _fused_attend]
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
    if name == "inplace_memory":
        saved.append((memory.KeyValueMemory, "appended", memory.KeyValueMemory.appended))
        memory.KeyValueMemory.appended = _copied_appended
    if name == "packed_weights":
        saved.append((linear_module.Linear, "forward", linear_module.Linear.forward))
        linear_module.Linear.forward = _plain_forward
    if name == "masked_sums":
        saved.append((beam_module, "_totals", beam_module._totals))
        beam_module._totals = _copied_totals
    try:
        yield
    finally:
        for module, attr, value in saved:
            setattr(module, attr, value)


def _fused_qkv_step(self, x, cache, prepared, memory_mask, group):
    """DecoderLayer.step with q, k and v from one product of the concatenated weights."""
    attn = self.self_attn
    if "_qkv" not in attn.__dict__:
        attn.__dict__["_qkv"] = linear_module.Linear(attn.d_model, 3 * attn.d_model).eval()
        with torch.no_grad():
            attn._qkv.weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
            attn._qkv.bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
    h = self.norm1(x)
    q, k, v = (attn._split(part) for part in attn._qkv(h).split(attn.d_model, dim=-1))
    mem = cache["self"].appended(attention.KeyValue(k, v))
    heads, _ = attention.attend(q, mem.keys.k, mem.keys.v, None)
    x = x + self.dropout(attn.merge(heads))
    c, cross_cache, extras = self.cross.step(x, prepared, memory_mask, cache["cross"], group)
    return c + self.dropout(self.ffn(self.norm3(c))), {"self": mem, "cross": cross_cache}, extras


@contextlib.contextmanager
def fused_qkv_on():
    """The tried lever: one (D, 3D) self-attention product per decoder layer and step."""
    from catcap.models.decoders.transformer import DecoderLayer

    step = DecoderLayer.step
    DecoderLayer.step = _fused_qkv_step
    try:
        yield
    finally:
        DecoderLayer.step = step


_COMPILED = {}


def _compiled_ffn_step(self, x, cache, prepared, memory_mask, group):
    """DecoderLayer.step with its FFN block compiled (one graph per layer and row count)."""
    h = self.norm1(x)
    mem = cache["self"].appended(self.self_attn.project_kv(h))
    x = x + self.dropout(self.self_attn(h, mem.keys)[0])
    c, cross_cache, extras = self.cross.step(x, prepared, memory_mask, cache["cross"], group)
    block = _COMPILED.setdefault(id(self), torch.compile(lambda c, layer=self: c + layer.ffn(layer.norm3(c)),
                                                         dynamic=False))
    return block(c), {"self": mem, "cross": cross_cache}, extras


@contextlib.contextmanager
def compile_ffn_on():
    """The tried lever: the decoder layers' FFN blocks through torch.compile."""
    from catcap.models.decoders.transformer import DecoderLayer

    step = DecoderLayer.step
    DecoderLayer.step = _compiled_ffn_step
    try:
        yield
    finally:
        DecoderLayer.step = step


TRIED = {"few_queries": few_queries_on, "fused_qkv": fused_qkv_on, "compile_ffn": compile_ffn_on,
         "inference_mode": torch.inference_mode}  # "on" patches it in


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--jobs", nargs="+", default=["greedy", "beam"], choices=["greedy", "beam"])
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    add_malloc_argument(parser)
    args = parser.parse_args()
    applied = keep_freed_memory(args.malloc)
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
            run(job, lever, True), run(job, lever, False)  # warm-up (compile_ffn: compiles)
            on, off = [], []
            for r in range(args.repeats):
                order = (True, False) if r % 2 == 0 else (False, True)
                for state in order:
                    (on if state else off).append(run(job, lever, state))
            ratio = statistics.median(a / b for a, b in zip(on, off))
            print(json.dumps({"job": job, "lever": lever, "on_s": round(statistics.median(on), 4),
                              "off_s": round(statistics.median(off), 4), "on_over_off": round(ratio, 3),
                              "repeats": args.repeats, "threads": 1,
                              "malloc": "catcap" if applied else "system"}), flush=True)


if __name__ == "__main__":
    main()
