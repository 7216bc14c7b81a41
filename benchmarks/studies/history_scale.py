"""Why does the paper's literal CACA leave the history unused at CAT's top layer? A study of scale.

On Flickr8k, CAT with the paper's CACA (history entries c_tmp, ``model.history.normalize:
false``) learns a top-layer history weight of about 0.01 where catcap's CACA (entries
LayerNorm(c_tmp)) learns 0.12-0.15 (benchmarks/flickr8k.md, "The paper's experiment, seed by
seed"). The suspected reason: in a pre-norm decoder c_tmp is the residual stream, whose scale
grows layer by layer, while the regions' keys come from the encoder's normalised output, so
un-normalised entries give the history keys and values a scale the regions' do not have.

This script measures it. For each checkpoint it decodes ``--images`` val photos greedily and,
at every step and decoder layer, records in CACA's final pass (by wrapping each layer's
``final_pass``; the model runs as it is):

- the root-mean-square of the region keys K_X and values V_X, of the history keys K_HCM and
  values V_HCM, and of the query q (all per head, d_k wide);
- the mean score q k / sqrt(d_k) on history entries and on regions;
- the history weight a = sigmoid(logsumexp(s_HCM) - logsumexp(s_X)), as the model computes it.

Every number is a mean over steps, rows and heads (and entries or regions). Usage:

    python benchmarks/studies/history_scale.py RUN/best [RUN/best ...] --dataset data/flickr8k/dataset_flickr8k.json \\
        --features data/flickr8k/lite2.h5 [--images 200] [--label NAME ...]

It prints a markdown table, one row per checkpoint and layer. Transformer-family CACA with
shared weights only (the form CAT's presets use); other models are refused by name.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

import torch

from catcap import Captioner
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.models.cross.transformer import TransformerCrossAttention

COLUMNS = ("K_X", "V_X", "K_HCM", "V_HCM", "q", "score_X", "score_HCM", "a")


def rms(x: torch.Tensor) -> float:
    return x.float().pow(2).mean().sqrt().item()


def record_layer(cross: TransformerCrossAttention, sums: dict) -> None:
    """Wrap one layer's ``final_pass`` (instance attribute) so that each call adds its numbers to ``sums``."""
    final_pass = cross.final_pass

    def recording(q, query, regions, prepared, memory_mask, history, mask, group, assist):
        if regions is not None and history is not None:  # CACA's shared-weight final pass with entries
            qh, region_kv = query[1], prepared.final
            d_k = qh.shape[-1]
            s_h = (qh[:, :history.k.shape[1]] @ history.k.transpose(-2, -1)) / math.sqrt(d_k)
            if mask is not None:
                s_h = s_h.masked_fill(~mask, float("nan"))
            a = torch.sigmoid(torch.logsumexp(s_h.nan_to_num(nan=-math.inf), -1) - regions.log_norm[..., 0])
            # region scores of the query's own image (rows grouped by image: group hypotheses each)
            keys = region_kv.k.repeat_interleave(qh.shape[0] // region_kv.k.shape[0], dim=0)
            s_x = (qh @ keys.transpose(-2, -1)) / math.sqrt(d_k)
            s_x = s_x.masked_fill(~memory_mask.repeat_interleave(qh.shape[0] // memory_mask.shape[0], dim=0)[:, None, None, :],
                                  float("nan"))
            for name, value in (("K_X", rms(region_kv.k)), ("V_X", rms(region_kv.v)), ("K_HCM", rms(history.k)),
                                ("V_HCM", rms(history.v)), ("q", rms(qh)), ("score_X", s_x.nanmean().item()),
                                ("score_HCM", s_h.nanmean().item()), ("a", a.mean().item())):
                sums[name].append(value)
        return final_pass(q, query, regions, prepared, memory_mask, history, mask, group, assist)

    cross.final_pass = recording


def attach(model) -> list[dict]:
    """Record every decoder layer of ``model`` (bottom first): a dict per layer of COLUMNS -> the
    values of each final pass with history entries, in call order (one per decoding step)."""
    layers = getattr(model.decoder, "layers", None)
    if layers is None or not all(isinstance(getattr(layer, "cross", None), TransformerCrossAttention) for layer in layers):
        raise SystemExit("not a Transformer-family decoder with CACA; this study reads only those")
    sums = [defaultdict(list) for _ in layers]
    for layer, numbers in zip(layers, sums):
        record_layer(layer.cross, numbers)
    return sums


def measure(checkpoint: Path, keys: list[str], store, batch: int = 25) -> list[dict]:
    """Per decoder layer (bottom first), the mean of each of COLUMNS over the greedy decoding of ``keys``."""
    captioner = Captioner.from_pretrained(checkpoint, device="cpu")
    sums = attach(captioner.model)
    for i in range(0, len(keys), batch):
        feats = [store.get(k).regions for k in keys[i:i + batch]]
        captioner.generate(feats, num_beams=1)
    if not sums[0]:
        raise SystemExit(f"{checkpoint}: no CACA final pass with history entries ran (model.cross_attention "
                         "caca with shared weights expected)")
    return [{name: sum(values) / len(values) for name, values in numbers.items()} for numbers in sums]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--dataset", required=True, help="Karpathy split file (its val split is decoded)")
    parser.add_argument("--features", required=True, help="the feature store the checkpoints were trained on")
    parser.add_argument("--images", type=int, default=200, help="val photos to decode (default 200, the first ones)")
    parser.add_argument("--label", nargs="*", default=None, help="a name per checkpoint for the table")
    args = parser.parse_args()
    labels = args.label or [str(c) for c in args.checkpoints]
    if len(labels) != len(args.checkpoints):
        raise SystemExit(f"--label: {len(labels)} names for {len(args.checkpoints)} checkpoints")
    keys = [str(r.image_id) for r in load_karpathy(args.dataset, "val")["val"][:args.images]]
    torch.set_num_threads(1)
    print(f"greedy decoding of {len(keys)} val photos; RMS per head (d_k wide), scores q k / sqrt(d_k), "
          "a = the history weight (means over steps, rows, heads)\n")
    print("| model | layer | " + " | ".join(COLUMNS) + " |")
    print("|---|---|" + "---|" * len(COLUMNS))
    with open_feature_store(args.features) as store:
        for label, checkpoint in zip(labels, args.checkpoints):
            rows = measure(checkpoint, keys, store)
            for k, row in enumerate(rows):
                print(f"| {label} | {k + 1} of {len(rows)} | " + " | ".join(f"{row[c]:.3f}" for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
