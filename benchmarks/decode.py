"""Decoding and training-step speed at the paper's size (issue 3).

Paper preset (D=512, H=8, 3+3 layers, d_ff 2048) with random weights, vocab 10,000,
50 images x 50 regions x 2048-d features, max length 16, eval mode, no grad. Greedy and
beam-5 decoding always run the full 16 steps (``<eos>`` suppressed) so runs compare; one XE
training step on 50 captions of 16 words. Prints one JSON line per thread count:
{"greedy_s", "beam_s", "train_step_s", "threads"} (medians of --repeats runs).

Usage: python benchmarks/decode.py [--threads 1 2] [--repeats 3] [--cross vanilla]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from catcap.decoding import beam_search, build_processors, greedy
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig
from catcap.training.losses import cross_entropy
from catcap.training.setup import make_optimizer

V, B, N, F, T = 10000, 50, 50, 2048, 16


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cross", default="vanilla", help="cross-attention variant (vanilla, ...)")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = build_captioner(ModelConfig(cross_attention=args.cross), V)
    feats, mask = torch.randn(B, N, F), torch.ones(B, N, dtype=torch.bool)
    captions = torch.randint(4, V, (B, T + 2))
    captions[:, 0], captions[:, -1] = 1, 2
    no_eos = build_processors(model.eos_id, suppress_eos=True)
    opt = make_optimizer(model.parameters(), torch.device("cpu"), lr=1e-4)  # as the trainer (fused)

    def train_step():
        model.train()
        logits, _ = model(feats, mask, captions, torch.ones_like(captions, dtype=torch.bool))
        loss = cross_entropy(logits, captions[:, 1:], torch.ones_like(captions[:, 1:], dtype=torch.bool))
        opt.zero_grad()
        loss.backward()
        opt.step()

    def decode(fn, **kw):
        model.eval()
        with torch.no_grad():
            fn(model, feats, mask, max_len=T, processors=no_eos, **kw)

    for threads in args.threads:
        torch.set_num_threads(threads)
        result = {
            "greedy_s": round(median_time(lambda: decode(greedy), args.repeats), 4),
            "beam_s": round(median_time(lambda: decode(beam_search, beam_size=5), args.repeats), 4),
            "train_step_s": round(median_time(train_step, args.repeats), 4),
            "threads": threads, "cross_attention": args.cross,
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
