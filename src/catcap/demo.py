"""``catcap demo``: world -> training -> test-set evaluation -> a few captions, in minutes.

1. make the built-in shapes world (unless it exists), 2. train the tiny Transformer of
``configs/experiments/demo.yaml``, 3. caption the test split with beam search and score it
next to a "most frequent training caption" baseline, 4. print captions of a few test images
next to their references. ``--compare transformer,cat,m2,m2_caca`` trains each preset's
variant (encoder, decoder, cross attention + AWC, at the demo's tiny size and settings) on the
same world with the same seed and prints one table.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Sequence

import torch
from torch.utils.data import DataLoader

from catcap.inference.captioner import Captioner
from catcap.config import load_config, read_yaml
from catcap.data.collate import collate_images
from catcap.data.datasets import ImageDataset
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.data.synthetic import make_world
from catcap.metrics.evaluate import evaluate_tokenized
from catcap.models.parts import recurrent_decoder
from catcap.training.experiment import ExperimentConfig
from catcap.training.loop import Trainer
from catcap.viz.training_curves import plot_if_logged

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


MODELS_DIR = DEMO_CONFIG.parents[1] / "models"
VARIANT_KEYS = {"model": ("encoder", "decoder", "cross_attention", "memory_slots", "history"), "train": ("awc",)}
# a recurrent (LSTM) preset also brings its one attention layer, the forms of its cells
# (model.rnn.maxout, pooled_embedding) and its training recipe (step schedule, scheduled sampling,
# label smoothing, gradient clipping), and takes the sizes of its family's tiny preset:
# configs/models/aoanet_tiny.yaml for AoANet, updown_tiny.yaml otherwise
RECURRENT_KEYS = {"model": ("decoder_layers",),
                  "train": ("schedule", "scheduled_sampling", "label_smoothing", "grad_clip", "grad_clip_mode")}
RNN_FORMS = ("maxout", "pooled_embedding")
RECURRENT_TINY = {"aoa": MODELS_DIR / "aoanet_tiny.yaml"}
DEFAULT_RECURRENT_TINY = MODELS_DIR / "updown_tiny.yaml"


def variant_overrides(name: str) -> list[str]:
    """The overrides that turn the demo's tiny Transformer into preset ``name``
    (``configs/models/<name>.yaml``, following its ``base``): its encoder, decoder, cross
    attention, memory slots, history options and AWC settings, not its sizes; for an LSTM
    preset also its recipe and the tiny LSTM sizes (``RECURRENT_KEYS``)."""
    path = MODELS_DIR / f"{name}.yaml"
    if not path.is_file():
        choices = sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))
        raise ValueError(f"unknown model preset {name!r} for --compare; choose from: {', '.join(choices)}")
    data, out, carried = read_yaml(path), [], VARIANT_KEYS
    decoder = data.get("model", {}).get("decoder", "transformer")
    if recurrent_decoder(decoder):
        carried = {section: VARIANT_KEYS[section] + RECURRENT_KEYS[section] for section in VARIANT_KEYS}
        tiny = read_yaml(RECURRENT_TINY.get(decoder, DEFAULT_RECURRENT_TINY))["model"]
        sizes = {k: v for k, v in tiny.items() if k not in VARIANT_KEYS["model"] and k != "feature_dim"}
        forms = {k: v for k, v in data["model"].get("rnn", {}).items() if k in RNN_FORMS}
        sizes["rnn"] = {**{k: v for k, v in sizes.get("rnn", {}).items() if k not in RNN_FORMS}, **forms}
        out += [item for key, value in sizes.items() for item in _flatten(f"model.{key}", value)]
    for section, keys in carried.items():
        for key in keys:
            if key in data.get(section, {}):
                out += _flatten(f"{section}.{key}", data[section][key])
    return out


def _flatten(prefix: str, value) -> list[str]:
    if isinstance(value, dict):
        return [item for k, v in value.items() for item in _flatten(f"{prefix}.{k}", v)]
    return [f"{prefix}={str(value).lower() if isinstance(value, bool) else value}"]


def train_and_score(cfg: ExperimentConfig, beam: int, log) -> tuple:
    """Train one model, caption the test split; -> (evaluation, ids, candidates)."""
    Trainer(cfg, log=log).fit()
    plot = plot_if_logged(cfg.out_dir)
    if plot:
        log(f"[catcap] training curves: {plot}")
    captioner = Captioner.from_pretrained(Path(cfg.out_dir) / "best")
    test = load_karpathy(cfg.data.dataset, [cfg.data.test_split])[cfg.data.test_split]
    dataset = ImageDataset(test, captioner.reading(open_feature_store(cfg.data.features)), captioner.vocab)
    ids, cands, refs = caption_split(captioner, dataset, beam)
    return evaluate_tokenized(ids, cands, refs, METRICS), ids, cands, refs


METRICS = ("bleu", "meteor", "rouge", "cider")


def run_demo(out_dir: str | Path = "runs/demo", *, num_train: int = 3000, overrides=(), beam: int = 3,
             compare: Sequence[str] = (), log=print) -> dict:
    """Run the whole demo; returns {"model": scores, "baseline": scores, "seconds": ...}, and
    with ``compare`` (preset names, e.g. transformer, cat, lightcat) {"models": {name: scores}, ...}."""
    out_dir, start = Path(out_dir), time.perf_counter()
    names = list(compare) or [None]
    plans = {name: demo_config(out_dir, [*(variant_overrides(name) if name else []),
                                         *([f"out_dir={out_dir / 'models' / name}"] if name else []), *overrides])
             for name in names}  # every config is checked before any work starts
    world = out_dir / "world"
    if not (world / "dataset_shapes.json").exists():
        log(f"[catcap] 1/4 making the shapes world in {world}")
        make_world(world, num_train=num_train, num_val=250, num_test=250, seed=0)
    results = {}
    for i, (name, cfg) in enumerate(plans.items()):
        label = f"the tiny {name or 'Transformer'}"
        log(f"[catcap] 2/4 training {label} ({cfg.train.epochs} epochs) -> {cfg.out_dir}"
            + (f" [{i + 1}/{len(plans)}]" if compare else ""))
        results[name] = train_and_score(cfg, beam, log)
        log(f"[catcap] 3/4 captioned the test split with {label} (beam {beam})")
        if not any(results[name][2]):
            log(f"[catcap] warning: {label} wrote no word for any test image (it emits <eos> first): it is "
                f"under-trained after {cfg.train.epochs} epoch(s); its scores are those of empty captions. "
                f"Give it more, e.g. train.epochs={4 * cfg.train.epochs}")
    cfg = next(iter(plans.values()))
    train = load_karpathy(cfg.data.dataset, [cfg.data.train_split])[cfg.data.train_split]
    test = load_karpathy(cfg.data.dataset, [cfg.data.test_split])[cfg.data.test_split]
    _, ids, _, refs = next(iter(results.values()))
    frequent = most_frequent_caption(train)
    base = evaluate_tokenized(ids, [frequent] * len(ids), refs, METRICS)
    log(f"[catcap] 4/4 results on {len(ids)} test images")
    columns = {("tiny Transformer" if name is None else f"tiny {name}"): r[0] for name, r in results.items()}
    captions = {("catcap" if name is None else name): r[2] for name, r in results.items()}
    print_results(columns, base, frequent, ids, captions, test)
    seconds = time.perf_counter() - start
    print(f"\ndemo finished in {seconds / 60:.1f} min; models in " + ", ".join(str(Path(c.out_dir) / "best") for c in plans.values()))
    if compare:
        return {"models": {n: r[0].corpus for n, r in results.items()}, "baseline": base.corpus, "seconds": seconds}
    return {"model": results[None][0].corpus, "baseline": base.corpus, "seconds": seconds}


def print_results(columns: dict, base, frequent, ids, captions: dict, records, shown: int = 4) -> None:
    """One metrics table (a column per model, then the baseline) and a few images' captions."""
    widths = [max(len(c), 8) for c in columns]
    print("\n" + f"{'metric':<10} " + " ".join(f"{c:>{w}}" for c, w in zip(columns, widths)) + f" {'most frequent caption':>22}")
    first = next(iter(columns.values()))
    for name in first.corpus:
        cells = " ".join(f"{ev.corpus[name]:>{w}.3f}" for ev, w in zip(columns.values(), widths))
        print(f"{name:<10} {cells} {base.corpus.get(name, float('nan')):>22.3f}")
    for key, reason in first.unavailable.items():
        print(f"{key:<10} unavailable: {reason[:80]}")
    print(f"(baseline caption: \"{' '.join(frequent)}\")")
    by_id = {r.image_id: r for r in records}
    width = max(len(n) for n in captions) + 1
    for row, image_id in enumerate(ids[:shown]):
        rec = by_id[image_id]
        print(f"\nimage {rec.filename}")
        for name, cands in captions.items():
            print(f"  {name + ':':<{width}}   {' '.join(cands[row])}")
        for ref in rec.raw[:3]:
            print(f"  {'reference:':<{width}}   {ref}")
