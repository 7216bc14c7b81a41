"""The floor issue 39 measures catcap against: a minimal static Transformer captioner in plain
PyTorch, at the paper's size, greedy and beam 5, eager and as one CUDA graph.

Paper size: D=512, 8 heads, 3 encoder + 3 decoder layers (pre-norm), d_ff 2048, vocab 10,000,
50 images x 50 regions x 2048-d features, 16 words (``<eos>`` never chosen, as decode.py), fp32,
random weights. Everything a step touches is allocated once before the first step:

    K/V caches   (R, H, T+1, d_k) per layer, R = B (greedy) or B*5 (beam); step t writes slot t
    cross K/V    (B, H, N, d_k) per layer, projected once per image (beams: repeated per beam)
    step index   a device tensor t, incremented in place; the self-attention reads slots <= t
    tokens       (R, T+1), scores (B, K) for beam

One step: x = E[w] * sqrt(D) + P[t]; per layer x += SelfAttn(LN x) over the cache,
x += CrossAttn(LN x, regions), x += FFN(LN x); logits = W LN(x). ``<eos>``, ``<bos>`` and
``<pad>`` are never chosen (decode.py's workload: every caption runs all 16 words + the final
step), so no row ever finishes and the reference has no finished-row bookkeeping: it is a
floor, not a full decoder. Greedy takes the argmax; the static beam reference keeps K beams per
image, scores (B, K) + log p (B*K, V) -> top K of K x V per image, caches and tokens reordered
by gather. The regions are all real (as decode.py's), so the encoder (torch's
``nn.TransformerEncoder``, pre-norm) reads no mask; the cross attention does. A graph is
captured once per (batch, job) after a warm-up on a side stream and replayed: one launch for
the whole decode.

Usage (GPU): python benchmarks/gpu/reference_decoder.py --device cuda [--repeats 10]
Smoke (CPU, tiny sizes, eager only): python benchmarks/gpu/reference_decoder.py --device cpu --quick
Prints one JSON line per job and mode: {"job", "mode", "seconds", ...} (median of --repeats).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

PAPER = dict(vocab=10000, d_model=512, heads=8, layers=3, d_ff=2048, features=2048, images=50, regions=50, words=16)
QUICK = dict(vocab=50, d_model=32, heads=4, layers=2, d_ff=64, features=24, images=3, regions=5, words=6)
BOS, EOS, PAD = 1, 2, 0


class Layer(nn.Module):
    """Pre-norm decoder layer: masked self-attention over a static cache, cross attention, FFN."""

    def __init__(self, d: int, heads: int, d_ff: int):
        super().__init__()
        self.heads = heads
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.qkv, self.self_out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.q, self.kv, self.cross_out = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.ReLU(), nn.Linear(d_ff, d))

    def split(self, x: Tensor) -> Tensor:
        """(R, L, D) -> (R, H, L, d_k)."""
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def regions(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross keys and values (B, H, N, d_k), once per image."""
        k, v = self.kv(memory).chunk(2, -1)
        return self.split(k), self.split(v)

    def forward(self, x: Tensor, t: Tensor, cache: tuple[Tensor, Tensor], seen: Tensor, cross, region_mask):
        """x (R, 1, D); slot t of the cache written in place; ``seen`` (1, 1, 1, T+1) slots <= t."""
        q, k, v = (self.split(p) for p in self.qkv(self.norms[0](x)).chunk(3, -1))
        cache[0].index_copy_(2, t.view(1), k)
        cache[1].index_copy_(2, t.view(1), v)
        a = F.scaled_dot_product_attention(q, cache[0], cache[1], attn_mask=seen)
        x = x + self.self_out(a.transpose(1, 2).reshape(x.shape))
        q = self.split(self.q(self.norms[1](x)))
        a = F.scaled_dot_product_attention(q, cross[0], cross[1], attn_mask=region_mask)
        x = x + self.cross_out(a.transpose(1, 2).reshape(x.shape))
        return x + self.ffn(self.norms[2](x))


class ReferenceCaptioner(nn.Module):
    """Embedding + 3 encoder layers over the regions, 3 static decoder layers (module doc)."""

    def __init__(self, vocab, d_model, heads, layers, d_ff, features, words, **_):
        super().__init__()
        self.d, self.words = d_model, words
        self.project = nn.Linear(features, d_model)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, heads, d_ff, 0.0, batch_first=True,
                                                                        norm_first=True), layers,
                                             enable_nested_tensor=False)
        self.embed, self.positions = nn.Embedding(vocab, d_model), nn.Parameter(torch.randn(words + 1, d_model) * 0.02)
        self.layers = nn.ModuleList(Layer(d_model, heads, d_ff) for _ in range(layers))
        self.norm, self.output = nn.LayerNorm(d_model), nn.Linear(d_model, vocab)
        self.register_buffer("banned", torch.tensor([EOS, BOS, PAD]), persistent=False)

    def prepare(self, features: Tensor, mask: Tensor, beams: int):
        """Encoder, cross K/V per layer (repeated per beam), empty caches, the step index."""
        memory = self.encoder(self.project(features))  # all regions real (module doc)
        cross = [tuple(x.repeat_interleave(beams, 0) for x in layer.regions(memory)) for layer in self.layers]
        rows, heads = features.shape[0] * beams, self.layers[0].heads
        caches = [tuple(memory.new_zeros(rows, heads, self.words + 1, self.d // heads) for _ in range(2))
                  for _ in self.layers]
        region_mask = mask.repeat_interleave(beams, 0)[:, None, None, :]
        return cross, caches, region_mask, torch.zeros((), dtype=torch.long, device=features.device)

    def step(self, tokens: Tensor, t: Tensor, cross, caches, region_mask) -> Tensor:
        """tokens (R,) at step t (device scalar) -> log-probs (R, V), <eos> suppressed."""
        x = self.embed(tokens)[:, None] * math.sqrt(self.d) + self.positions.index_select(0, t.view(1))
        seen = (torch.arange(self.words + 1, device=t.device) <= t).view(1, 1, 1, -1)
        for layer, cache, kv in zip(self.layers, caches, cross):
            x = layer(x, t, cache, seen, kv, region_mask)
        log_probs = self.output(self.norm(x[:, 0])).log_softmax(-1)
        return log_probs.index_fill(1, self.banned, -math.inf)

    def greedy(self, features: Tensor, mask: Tensor) -> Tensor:
        """(B, T+1) tokens: the argmax at every step."""
        cross, caches, region_mask, t = self.prepare(features, mask, 1)
        tokens = torch.full((features.shape[0], self.words + 2), BOS, dtype=torch.long, device=features.device)
        for _ in range(self.words + 1):
            word = self.step(tokens.gather(1, t.view(1, 1).expand(tokens.shape[0], 1))[:, 0], t, cross, caches,
                             region_mask).argmax(-1)
            tokens.scatter_(1, (t + 1).view(1, 1).expand(tokens.shape[0], 1), word[:, None])
            t += 1
        return tokens[:, 1:]

    def beam(self, features: Tensor, mask: Tensor, k: int = 5) -> Tensor:
        """(B, T+1) tokens of each image's best beam (static beam search, module doc)."""
        b = features.shape[0]
        cross, caches, region_mask, t = self.prepare(features, mask, k)
        scores = features.new_zeros(b, k)
        scores[:, 1:] = -math.inf  # step 0: one beam per image
        tokens = torch.full((b * k, self.words + 2), BOS, dtype=torch.long, device=features.device)
        first_row = torch.arange(b, device=features.device)[:, None] * k
        for _ in range(self.words + 1):
            last = tokens.gather(1, t.view(1, 1).expand(b * k, 1))[:, 0]
            log_probs = self.step(last, t, cross, caches, region_mask)
            total = (scores.view(-1, 1) + log_probs).view(b, -1)
            scores, best = total.topk(k, dim=1)
            rows = (first_row + best // log_probs.shape[1]).view(-1)
            for cache in caches:
                for x in cache:
                    x.copy_(x.index_select(0, rows))
            tokens = tokens.index_select(0, rows)
            tokens.scatter_(1, (t + 1).view(1, 1).expand(b * k, 1), (best % log_probs.shape[1]).view(-1, 1))
            t += 1
        return tokens.view(b, k, -1)[:, 0, 1:]


class Graphed:
    """``fn(features, mask)`` captured once as one CUDA graph (after a side-stream warm-up), replayed."""

    def __init__(self, fn, features: Tensor, mask: Tensor):
        self.features, self.mask = features.clone(), mask.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(self.features, self.mask)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = fn(self.features, self.mask)

    def __call__(self, features: Tensor, mask: Tensor) -> Tensor:
        self.features.copy_(features)
        self.mask.copy_(mask)
        self.graph.replay()
        return self.out


def timed(fn, device: torch.device, repeats: int) -> float:
    """Median seconds of ``fn()`` (one warm-up; CUDA synchronised around each call)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(device: torch.device, quick: bool, seed: int = 0):
    """The reference model and decode.py-style inputs (all regions real), at the paper's or the quick size."""
    size = QUICK if quick else PAPER
    torch.manual_seed(seed)
    model = ReferenceCaptioner(**size).to(device).eval()
    features = torch.randn(size["images"], size["regions"], size["features"], device=device)
    return model, features, torch.ones(features.shape[:2], dtype=torch.bool, device=device), size


def runners(model, features, mask, device: torch.device) -> dict:
    """{(job, mode): callable}: greedy and beam 5, eager and (CUDA only) as one graph."""
    jobs = {"greedy": model.greedy, "beam": model.beam}
    out = {(job, "eager"): (lambda fn=fn: fn(features, mask)) for job, fn in jobs.items()}
    if device.type == "cuda":
        for job, fn in jobs.items():
            graph = Graphed(fn, features, mask)
            out[(job, "graph")] = lambda g=graph: g(features, mask)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, e.g. on a CPU)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, features, mask, size = build(device, args.quick)
    with torch.no_grad():
        for (job, mode), fn in runners(model, features, mask, device).items():
            seconds = timed(fn, device, args.repeats)
            words = fn().shape[1] - 1
            print(json.dumps({"job": job, "mode": mode, "seconds": round(seconds, 5), "device": args.device,
                              "images": size["images"], "words": words, "quick": args.quick}), flush=True)


if __name__ == "__main__":
    main()
