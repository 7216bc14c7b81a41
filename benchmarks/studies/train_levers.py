"""Training-step levers of issue 25, each timed on and off in one run (paired, interleaved).

The XE step of ``decode.py`` (paper-size Transformer, 50 captions of 16 words + ``<eos>``,
fused Adam, one thread). Each repeat times the step with the lever off and on, in alternating
order; the median of the paired ratios on/off is printed with the medians of both times.

Levers (both tried 2026-11-27; neither is in catcap):
  fused_attention  every attention's dropout on its weights set to 0, so that PyTorch's fused
                   CPU attention kernel runs forward *and* backward. With dropout > 0 that
                   kernel is not used on CPU: PyTorch falls back to its unfused path (two
                   batched products, softmax and a dropout mask forward, four products
                   backward). This measures what a fused backward would give; it changes the
                   model's regularisation, so it is a measurement, not an option.
  fused_vocab_loss the vocabulary product and the cross entropy as one function
                   (:class:`LinearCrossEntropy`): the loss and all three gradients from one
                   logits buffer (softmax in place, minus one at the targets, then the two
                   backward products), instead of logits, log-softmax and their backward as
                   separate (850, 10,000) tensors. Its loss and gradients are checked against
                   the plain path before timing.

Usage: python benchmarks/studies/train_levers.py [--repeats 7] [--levers fused_attention fused_vocab_loss]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from catcap.malloc import keep_freed_memory
from catcap.models.attention import MultiHeadAttention
from catcap.models.linear import linear
from catcap.training.losses import cross_entropy
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: decode.py, workload.py
from decode import Bench  # noqa: E402
from workload import B, F, N, T, V  # noqa: E402

LEVERS = ("fused_attention", "fused_vocab_loss")


class LinearCrossEntropy(torch.autograd.Function):
    """Mean cross entropy of ``h W^T + b`` over rows with ``mask``; the gradients are computed
    in forward from the same buffer. h (R, D), weight (V, D), bias (V,), targets (R,), mask (R,)."""

    @staticmethod
    def forward(ctx, h, weight, bias, targets, mask):
        logits = linear(h.detach(), weight.detach(), bias.detach())  # (R, V)
        lse = torch.logsumexp(logits, dim=1)
        rows = torch.arange(h.shape[0])
        count = mask.sum().clamp(min=1).to(logits.dtype)
        scale = mask.to(logits.dtype) / count
        loss = ((lse - logits[rows, targets]) * scale).sum()
        probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place
        probs[rows, targets] -= 1.0
        probs.mul_(scale[:, None])  # d loss / d logits
        ctx.grads = (linear(probs, weight.detach().t()), linear(probs.t(), h.detach().t()), probs.sum(0))
        return loss

    @staticmethod
    def backward(ctx, grad):
        grad_h, grad_w, grad_b = ctx.grads
        return grad_h * grad, grad_w * grad, grad_b * grad, None, None


def fused_step(bench: Bench) -> None:
    """Bench.train_step with the decoder's vocabulary product and the loss fused."""
    model, decoder = bench.model.train(), bench.model.decoder
    output, cmask = decoder.output, torch.ones_like(bench.captions, dtype=torch.bool)
    decoder.output = torch.nn.Identity()  # forward returns the final (normed) states
    try:
        states, _ = model(bench.feats, bench.mask, bench.captions, cmask)
    finally:
        decoder.output = output
    targets = bench.captions[:, 1:].reshape(-1)
    loss = LinearCrossEntropy.apply(states.reshape(-1, states.shape[-1]), output.weight, output.bias, targets,
                                    cmask[:, 1:].reshape(-1))
    bench.opt.zero_grad()
    loss.backward()
    bench.opt.step()


def check_fused() -> None:
    """The fused loss and gradients equal the plain path's (relative 1e-4)."""
    torch.manual_seed(1)
    h = torch.randn(40, 64, requires_grad=True)
    lin = torch.nn.Linear(64, 300)
    targets, mask = torch.randint(0, 300, (40,)), torch.rand(40) > 0.2
    plain = cross_entropy(lin(h)[None], targets[None], mask[None])
    grads = torch.autograd.grad(plain, [h, lin.weight, lin.bias])
    fused = LinearCrossEntropy.apply(h, lin.weight, lin.bias, targets, mask)
    for a, b in zip(grads, torch.autograd.grad(fused, [h, lin.weight, lin.bias])):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), "fused vocabulary loss disagrees with the plain one"
    assert torch.allclose(plain, fused, rtol=1e-5)


@contextlib.contextmanager
def attention_dropout_off(model):
    modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    saved = [m.dropout for m in modules]
    for m in modules:
        m.dropout = 0.0
    try:
        yield
    finally:
        for m, p in zip(modules, saved):
            m.dropout = p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--levers", nargs="+", default=list(LEVERS), choices=LEVERS)
    args = parser.parse_args()
    keep_freed_memory("catcap")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    bench = Bench("transformer", (torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool),
                                  torch.randint(4, V, (B, T + 2))), torch.device("cpu"))
    check_fused()

    def run(lever: str, on: bool) -> float:
        start = time.perf_counter()
        if lever == "fused_vocab_loss" and on:
            fused_step(bench)
        else:
            with attention_dropout_off(bench.model) if lever == "fused_attention" and on else contextlib.nullcontext():
                bench.train_step()
        return time.perf_counter() - start

    for lever in args.levers:
        run(lever, True), run(lever, False)  # warm-up
        on, off = [], []
        for r in range(args.repeats):
            for state in ((True, False) if r % 2 == 0 else (False, True)):
                (on if state else off).append(run(lever, state))
        print(json.dumps({"job": "train_step", "lever": lever, "on_s": round(statistics.median(on), 4),
                          "off_s": round(statistics.median(off), 4),
                          "on_over_off": round(statistics.median(a / b for a, b in zip(on, off)), 3),
                          "repeats": args.repeats, "threads": 1}), flush=True)


if __name__ == "__main__":
    main()
