"""Where the time of one SCST step goes (issue 5), next to an XE step on the same images.

A preset's model (``--models tiny transformer cat``: configs/models/NAME.yaml sizes) with
random weights, vocabulary 10,000, 50 images x 50 regions x feature_dim, references: 5 random
16-word captions per image, CIDEr-D document frequencies from 5,000 such images. One SCST step
(baseline ``mean``, 5 samples per image, max 16 words, ``<eos>`` allowed) is split into
sampling (cached decoder, no grad), reward (CIDEr-D of the 250 captions), and update (one
teacher-forced pass over the 250 captions with gradients, backward, Adam step); the XE step is
one training step on 50 captions (one per image) and on 250 (all five per image).
Prints one JSON line per model (medians of --repeats runs, seconds).

Usage: python benchmarks/scst.py [--models tiny transformer] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from catcap.config import load_config
from catcap.data.vocab import Vocab
from catcap.metrics.docfreq import DocumentFrequency
from catcap.models.builders import build_captioner
from catcap.training.experiment import ExperimentConfig
from catcap.training.losses import cross_entropy
from catcap.training.reward import CiderReward
from catcap.training.scst import SCSTConfig, advantages, draw_captions, policy_loss, sequence_log_probs
from catcap.training.setup import make_optimizer
from workload import PRESETS, B, N, T, V

REFS = 5


def random_refs(rng, images: int) -> list[list[list[str]]]:
    return [[[f"w{x}" for x in rng.integers(4, V, size=T)] for _ in range(REFS)] for _ in range(images)]


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name: str, repeats: int, reward, refs) -> dict:
    cfg = load_config(ExperimentConfig, PRESETS / f"{name}.yaml")
    vocab = Vocab([f"w{i}" for i in range(4, V)])
    torch.manual_seed(0)
    model = build_captioner(cfg.model, len(vocab))
    opt = make_optimizer(model.parameters(), torch.device("cpu"), lr=5e-6)
    feats, mask = torch.randn(B, N, cfg.model.feature_dim), torch.ones(B, N, dtype=torch.bool)
    scst = SCSTConfig(baseline="mean", num_samples=5, max_len=T)
    state = {}

    def sampling():
        state["out"], _ = draw_captions(model, feats, mask, scst, vocab)

    def rewarding():
        words = [vocab.decode(r.tolist()) for r in state["out"].tokens]
        r = np.asarray(reward(words, refs, np.repeat(np.arange(B), 5))).reshape(B, 5)
        state["adv"] = advantages(r, "mean")[1]

    def update():
        model.train()
        out = state["out"]
        lp, _, _, _ = sequence_log_probs(model, feats, mask, out.tokens, out.mask, 5)
        loss = policy_loss(lp, torch.as_tensor(state["adv"].reshape(-1), dtype=lp.dtype))
        opt.zero_grad()
        loss.backward()
        opt.step()

    def xe(rows: int):
        captions = torch.randint(4, len(vocab), (rows, T + 2))
        captions[:, 0], captions[:, -1] = 1, 2
        f, m = feats.repeat_interleave(rows // B, 0), mask.repeat_interleave(rows // B, 0)

        def step():
            model.train()
            logits, _ = model(f, m, captions, torch.ones_like(captions, dtype=torch.bool))
            loss = cross_entropy(logits, captions[:, 1:], torch.ones_like(captions[:, 1:], dtype=torch.bool))
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step

    sample_s = timed(sampling, repeats)
    reward_s = timed(rewarding, repeats)
    update_s = timed(update, repeats)
    total = sample_s + reward_s + update_s
    xe50, xe250 = timed(xe(B), repeats), timed(xe(B * 5), repeats)
    return {"model": name, "sample_s": round(sample_s, 4), "reward_s": round(reward_s, 4), "update_s": round(update_s, 4),
            "scst_step_s": round(total, 4), "reward_share": round(reward_s / total, 4),
            "xe_step_50_s": round(xe50, 4), "xe_step_250_s": round(xe250, 4),
            "scst_over_xe50": round(total / xe50, 3), "scst_over_xe250": round(total / xe250, 3),
            "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "transformer"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    reward = CiderReward(DocumentFrequency.from_references(random_refs(rng, 5000)))
    refs = random_refs(rng, B)
    for name in args.models:
        print(json.dumps(bench(name, args.repeats, reward, refs)), flush=True)


if __name__ == "__main__":
    main()
