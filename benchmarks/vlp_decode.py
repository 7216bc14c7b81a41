"""VLP: cached generation against re-running the whole sequence every step (issue 20).

The ``vlp_small`` preset (4 shared layers, D=256, 4 heads) with random weights, vocab 10,000,
50 images x 50 regions x 2048-d features, 16 greedy steps (``<eos>`` suppressed), one thread
by default. ``cached``: catcap's greedy decoding (the image part once per image, the previous
word's keys/values kept per layer, one word and one [MASK] per step). ``uncached``: VLP's
definition run literally, ``[CLS] r [SEP] w_1..w_{t-1} [MASK]`` through every layer at every
step t (``VLPDecoder.joint_states`` under the seq2seq mask). Both give the same words (checked).
Also one masked-token pre-training step on 50 captions of 16 words (forward, backward, Adam).
The two decoders are timed interleaved, and the ratio is the median of the within-repeat ratios.
Prints one JSON line: {"cached_s", "uncached_s", "speedup", "pretrain_step_s", "threads", ...}.

Usage: python benchmarks/vlp_decode.py [--threads 1] [--repeats 5] [--model vlp_small]
       python benchmarks/vlp_decode.py --device cuda --precision bf16 --model vlp     # BERT-base size
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from catcap.config import load_config
from catcap.decoding import build_processors, greedy
from catcap.models.builders import build_captioner
from catcap.models.vlp import MASK_ID
from catcap.training.experiment import ExperimentConfig
from catcap.training.mlm import MLMConfig, masked_batch, masked_lm_loss
from catcap.training.precision import Precision
from workload import PRESETS, B, F, N, T, V


@torch.no_grad()
def uncached_greedy(model, feats, mask) -> torch.Tensor:
    """Greedy words by running the whole sequence at every step (``<eos>`` and specials never chosen)."""
    memory = model.encoder(feats, mask)
    words = torch.zeros(B, 0, dtype=torch.long, device=feats.device)
    for _ in range(T):
        tokens = torch.cat([words, torch.full((B, 1), MASK_ID, device=feats.device)], 1)
        states = model.decoder.joint_states(memory, mask, tokens, torch.ones_like(tokens, dtype=torch.bool), "seq2seq")
        logits = model.decoder.output(states[:, -1])
        logits[:, :4] = float("-inf")
        words = torch.cat([words, logits.argmax(-1, keepdim=True)], 1)
    return words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", default="vlp_small")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: every time read after torch.cuda.synchronize(), TF32 off")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: decoding and the pre-training step's forward under autocast")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    amp = Precision(args.precision, dev)  # autocast exactly as catcap train --precision

    def clock() -> float:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    cfg = load_config(ExperimentConfig, PRESETS / f"{args.model}.yaml")
    torch.manual_seed(0)
    model = build_captioner(cfg.model, V).eval().to(dev)
    feats, mask = torch.randn(B, N, F, device=dev), torch.ones(B, N, dtype=torch.bool, device=dev)
    rules = build_processors(model.eos_id, suppress_ids=(0, 1, 3), suppress_eos=True)  # as uncached_greedy

    def cached():
        with torch.no_grad(), amp.autocast():
            return greedy(model, feats, mask, max_len=T, processors=rules).tokens

    def uncached():
        with amp.autocast():
            return uncached_greedy(model, feats, mask)

    same = torch.equal(cached()[:, :T], uncached())
    times = {"cached": [], "uncached": []}
    jobs = [("cached", cached), ("uncached", uncached)]
    for r in range(args.repeats):
        for name, fn in jobs if r % 2 == 0 else jobs[::-1]:  # alternate which goes first
            start = clock()
            fn()
            times[name].append(clock() - start)
    ratio = statistics.median(u / c for u, c in zip(times["uncached"], times["cached"]))

    captions = torch.randint(4, V, (B, T + 2))
    captions[:, 0], captions[:, -1] = 1, 2
    captions = captions.to(dev)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    steps = []
    model.train()
    for step in range(args.repeats + 1):
        start = clock()
        targets, real, inputs, selected, kind = masked_batch(captions, captions != 0, V, MLMConfig(), step)
        with amp.autocast():
            logits = model.decoder.masked_lm(model.encoder(feats, mask), mask, inputs, real, kind)
        loss = masked_lm_loss(logits.float(), targets, selected)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps.append(clock() - start)
    print(json.dumps({"model": args.model, "device": args.device, "precision": args.precision,
                      "threads": args.threads, "same_words": same,
                      "cached_s": round(statistics.median(times["cached"]), 4),
                      "uncached_s": round(statistics.median(times["uncached"]), 4), "speedup": round(ratio, 2),
                      "pretrain_step_s": round(statistics.median(steps[1:]), 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
