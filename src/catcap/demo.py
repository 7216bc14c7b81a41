"""``catcap demo``: world -> training -> test-set evaluation -> a few captions, in minutes.

1. make the built-in shapes world (unless it exists), 2. train the tiny Transformer of
``configs/experiments/demo.yaml``, 3. caption the test split with beam search and score it
next to a "most frequent training caption" baseline, 4. print captions of a few test images
next to their references.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from catcap.captioner import Captioner
from catcap.config import load_config
from catcap.data.collate import collate_images
from catcap.data.datasets import ImageDataset
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.data.synthetic import make_world
from catcap.metrics.evaluate import evaluate_tokenized
from catcap.training.experiment import ExperimentConfig
from catcap.training.loop import Trainer

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "experiments" / "demo.yaml"


def demo_config(out_dir: Path, overrides=()) -> ExperimentConfig:
    base = [f"out_dir={out_dir / 'model'}", f"data.dataset={out_dir / 'world' / 'dataset_shapes.json'}",
            f"data.features={out_dir / 'world' / 'features.h5'}"]
    return load_config(ExperimentConfig, DEMO_CONFIG, [*base, *overrides])


def most_frequent_caption(records) -> list[str]:
    counts = collections.Counter(tuple(c) for r in records for c in r.captions)
    return list(counts.most_common(1)[0][0])


@torch.no_grad()
def caption_split(captioner: Captioner, dataset: ImageDataset, beam: int) -> tuple[list, list, list]:
    ids, cands, refs = [], [], []
    for batch in DataLoader(dataset, batch_size=50, collate_fn=collate_images):
        texts = captioner.generate(batch.features, batch.feature_mask, num_beams=beam, max_length=20)
        ids += batch.image_ids
        cands += [t.split() for t in texts]
        refs += batch.references
    return ids, cands, refs


def run_demo(out_dir: str | Path = "runs/demo", *, num_train: int = 3000, overrides=(), beam: int = 3, log=print) -> dict:
    """Run the whole demo; returns {"model": scores, "baseline": scores, "seconds": ...}."""
    out_dir, start = Path(out_dir), time.perf_counter()
    world = out_dir / "world"
    if not (world / "dataset_shapes.json").exists():
        log(f"[catcap] 1/4 making the shapes world in {world}")
        make_world(world, num_train=num_train, num_val=250, num_test=250, seed=0)
    cfg = demo_config(out_dir, overrides)
    log(f"[catcap] 2/4 training the tiny Transformer ({cfg.train.epochs} epochs) -> {cfg.out_dir}")
    Trainer(cfg, log=log).fit()
    log("[catcap] 3/4 captioning the test split (beam %d)" % beam)
    captioner = Captioner.from_pretrained(Path(cfg.out_dir) / "best")
    test = load_karpathy(cfg.data.dataset, [cfg.data.test_split])[cfg.data.test_split]
    train = load_karpathy(cfg.data.dataset, [cfg.data.train_split])[cfg.data.train_split]
    dataset = ImageDataset(test, open_feature_store(cfg.data.features), captioner.vocab)
    ids, cands, refs = caption_split(captioner, dataset, beam)
    metrics = ("bleu", "meteor", "rouge", "cider")
    ours = evaluate_tokenized(ids, cands, refs, metrics)
    frequent = most_frequent_caption(train)
    base = evaluate_tokenized(ids, [frequent] * len(ids), refs, metrics)
    log(f"[catcap] 4/4 results on {len(ids)} test images")
    print_results(ours, base, frequent, ids, cands, test)
    seconds = time.perf_counter() - start
    print(f"\ndemo finished in {seconds / 60:.1f} min; model in {Path(cfg.out_dir) / 'best'}")
    return {"model": ours.corpus, "baseline": base.corpus, "seconds": seconds}


def print_results(ours, base, frequent, ids, cands, records, shown: int = 4) -> None:
    print(f"\n{'metric':<10} {'tiny Transformer':>17} {'most frequent caption':>22}")
    for name, value in ours.corpus.items():
        print(f"{name:<10} {value:>17.3f} {base.corpus.get(name, float('nan')):>22.3f}")
    for key, reason in ours.unavailable.items():
        print(f"{key:<10} unavailable: {reason[:80]}")
    print(f"(baseline caption: \"{' '.join(frequent)}\")")
    by_id = {r.image_id: r for r in records}
    for image_id, cand in list(zip(ids, cands))[:shown]:
        rec = by_id[image_id]
        print(f"\nimage {rec.filename}")
        print(f"  catcap:     {' '.join(cand)}")
        for ref in rec.raw[:3]:
            print(f"  reference:  {ref}")
