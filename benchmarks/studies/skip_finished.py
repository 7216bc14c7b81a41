"""Issue 25's "skipping finished rows" lever, measured on a trained model with real ``<eos>``s.

``decode.py`` suppresses ``<eos>``, so no row there ever finishes. Here a bundled model decodes
the Flickr8k validation photos (its Lite feature store), greedy, in batches, twice per batch
in alternating order: catcap's greedy loop, and the same loop that stops running the model for
rows that have emitted ``<eos>`` (the state is narrowed to the open rows whenever 10% of them
have finished; finished rows get ``<pad>`` as before). Prints the share of row-steps after
``<eos>``, both times (sums of per-batch medians), their ratio, and whether every caption is
the same token for token.

Exactness: a row's numbers do not depend on how many rows run with it, as long as no product
changes backend: catcap's Linear takes oneDNN (packed weights, row-count invariant from 2 rows)
at or above ``MIN_MACS`` multiply-adds and PyTorch's MKL below (invariant from 4 rows). So the
state is never narrowed below ``min_rows`` (the largest such threshold not above the batch's
row count, and at least 4); the other rows are kept running.

Models whose prepared image memory has no per-image selection (CAT's ``PreparedRegions``) are
refused with a message: the lever was measured on the Transformer-family M2 model.

Usage: python benchmarks/studies/skip_finished.py [--model flickr8k-m2] [--images 1000] [--batch 50]
       (needs data/flickr8k/dataset_flickr8k.json and the model's feature store, e.g.
       data/flickr8k/lite2.h5: benchmarks/flickr8k.md makes them)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

from catcap.inference.captioner import Captioner
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.decoding import greedy
from catcap.decoding.greedy import rows_output, step_scores
from catcap.malloc import keep_freed_memory
from catcap.models.decoders.state import DecoderState, select_rows
from catcap.models.linear import MIN_MACS, Linear


def min_rows(model, rows: int) -> int:
    """The fewest rows the state may be narrowed to without any product changing backend."""
    thresholds = [math.ceil(MIN_MACS / (m.in_features * m.out_features)) for m in model.modules()
                  if isinstance(m, Linear)]
    return max([4] + [t for t in thresholds if t <= rows])


def narrowed(state: DecoderState, keep: torch.Tensor) -> DecoderState:
    """The state of rows ``keep`` only (greedy: one row per image)."""
    return DecoderState(select_rows(state.memory, keep), state.memory_mask.index_select(0, keep), state.group,
                        state.position, select_rows(state.caches, keep))


@torch.no_grad()
def greedy_skipping(model, features, feature_mask, max_len, processors=()):
    """catcap's greedy loop, running the model only on rows that have not finished."""
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, group=1)
    rows, floor = features.shape[0], min_rows(model, features.shape[0])
    active = torch.arange(rows)
    tokens = torch.full((rows,), model.bos_id, dtype=torch.long)
    finished = torch.zeros(rows, dtype=torch.bool)
    history, chosen, masks, row_steps = tokens.new_empty(rows, 0), [], [], 0
    for step in range(max_len + 1):
        part, state = model.step(tokens[active], state)
        row_steps += active.shape[0]
        logits = part.new_zeros(rows, part.shape[1]).index_copy_(0, active, part)
        log_probs, scores = step_scores(model, logits, history, finished, step, max_len, processors)
        tokens = scores.argmax(dim=-1)
        chosen.append(log_probs.gather(1, tokens[:, None])[:, 0].masked_fill(finished, 0.0))
        masks.append(~finished)
        history = torch.cat([history, tokens[:, None]], dim=1)
        finished = finished | (tokens == model.eos_id)
        if bool(finished.all()):
            break
        open_rows = (~finished[active]).nonzero()[:, 0]
        if open_rows.shape[0] <= 0.9 * active.shape[0] and active.shape[0] > floor:
            keep = open_rows if open_rows.shape[0] >= floor else _padded(open_rows, active.shape[0], floor)
            state, active = narrowed(state, keep), active[keep]
    return rows_output(history, torch.stack(chosen, 1), torch.stack(masks, 1), 1), row_steps


@torch.no_grad()
def check_narrowable(model, features: torch.Tensor) -> None:
    """Exit with a message when the model's prepared image memory has no per-image selection."""
    memory, memory_mask = model.encode(features[:1], torch.ones(features.shape[:2], dtype=torch.bool)[:1])
    try:
        select_rows(model.init_state(memory, memory_mask).memory, torch.arange(1))
    except TypeError as err:
        sys.exit(f"skip_finished.py: this model's prepared memory cannot be narrowed by image ({err})")


def _padded(open_rows: torch.Tensor, size: int, floor: int) -> torch.Tensor:
    """``open_rows`` plus finished ones, in order, up to ``floor`` positions of ``size``."""
    extra = torch.ones(size, dtype=torch.bool)
    extra[open_rows] = False
    return torch.cat([open_rows, extra.nonzero()[:, 0][:floor - open_rows.shape[0]]]).sort().values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="flickr8k-m2")
    parser.add_argument("--dataset", default="data/flickr8k/dataset_flickr8k.json")
    parser.add_argument("--features", help="default: the model's training feature store")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--max-len", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    keep_freed_memory("catcap")
    torch.set_num_threads(1)
    cap = Captioner.from_pretrained(args.model, device="cpu")
    try:
        store = cap.reading(open_feature_store(args.features or cap.data_file("features")))
        records = load_karpathy(args.dataset, ["val"])["val"][:args.images]
    except (OSError, ValueError) as err:
        sys.exit(f"skip_finished.py needs the Flickr8k split file and feature store ({err}); "
                 "benchmarks/flickr8k.md shows how to make them")
    model = cap.model.eval()
    plain_s = skip_s = 0.0
    same, steps_run, steps_all = True, 0, 0
    for start in range(0, len(records), args.batch):
        batch = [torch.as_tensor(store.get(r.key).regions) for r in records[start:start + args.batch]]
        feats = torch.stack(batch).float()
        mask = torch.ones(feats.shape[:2], dtype=torch.bool)
        if start == 0:
            check_narrowable(model, feats)
        plain, skipping = [], []
        for r in range(args.repeats):
            for skip in ((False, True) if r % 2 == 0 else (True, False)):
                t0 = time.perf_counter()
                if skip:
                    out, run = greedy_skipping(model, feats, mask, args.max_len)
                    skip_tokens = out.tokens
                else:
                    plain_tokens = greedy(model, feats, mask, args.max_len).tokens
                (skipping if skip else plain).append(time.perf_counter() - t0)
        same = same and torch.equal(skip_tokens, plain_tokens)
        steps_run += run
        steps_all += plain_tokens.shape[0] * plain_tokens.shape[1]
        plain_s += statistics.median(plain)
        skip_s += statistics.median(skipping)
    print(json.dumps({"model": args.model, "images": len(records), "batch": args.batch,
                      "min_rows": min_rows(model, args.batch), "row_steps_run_share": round(steps_run / steps_all, 3),
                      "plain_s": round(plain_s, 3), "skipping_s": round(skip_s, 3),
                      "skipping_over_plain": round(skip_s / plain_s, 3), "same_captions": same}))


if __name__ == "__main__":
    main()
