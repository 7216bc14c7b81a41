"""``catcap synth``, ``catcap train`` and ``catcap validate-config``."""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

from catcap.cli import checks, paths

SYNTH_HELP = """\
Make the built-in "shapes" world: procedurally drawn images of 1-4 coloured shapes with
5 captions each, question/answer pairs, and detector-like region features. It is written
as a normal dataset (images/, dataset_shapes.json in Karpathy format, features.h5), so
it exercises exactly the path real data takes.

example:
  catcap synth --out worlds/shapes --train 3000 --val 250 --test 250
"""

TRAIN_HELP = """\
Train a captioner from an experiment config (YAML, --config) plus key=value overrides; unknown
keys and wrong types are refused before anything runs. Checkpoints, log.jsonl and training.png
go to out_dir; --resume continues from out_dir/last exactly where it stopped. The presets
(configs/models/) and recipes (configs/experiments/) are listed after the options.
"""

TRAIN_NOTES = """\
Runs: checkpoints are safetensors + JSON, written atomically; --resume continues the log too (a
changed setting is named in it; a changed model or train.objective is refused). A new run in a
used out_dir moves the earlier log.jsonl to log.<time>.jsonl. Progress bars become one plain
line every 30 s when output goes to a file (CATCAP_PROGRESS_SECONDS).

Models: model.cross_attention=vanilla|caca|light_caca (Transformer, CAT, LightCAT; options
under model.history), train.awc.enabled=true adds CAT's adaptive weight constraint.
model.encoder=m2 model.decoder=m2 makes it the official M2 (post-norm; memory slots per head:
model.memory_slots): configs/models/m2_official.yaml, m2_official_caca.yaml;
model.encoder=memory_augmented model.decoder=meshed catcap's pre-norm M2 (with caca,
model.history.placement=per_level|gated says where the history lives): configs/models/m2.yaml,
m2_caca.yaml, m2_light_caca.yaml; docs/m2.md.
model.decoder=att2in|updown|lookback (with model.encoder=embed, model.decoder_layers=1) is an
LSTM captioner whose soft attention is vanilla, caca or light_caca; rnn size model.d_model,
other sizes model.rnn.word_dim / att_hidden, model.rnn.maxout (Att2in2's cell) and
model.rnn.pooled_embedding (Up-Down's pooled feature); train.scheduled_sampling.enabled=true
feeds it its own words (+increase every `every` epochs up to max_prob): configs/models/updown.yaml,
updown_caca.yaml (att2in*, lookback* alike; the official sizes); docs/recurrent.md.
model.encoder=aoa_refiner model.decoder=aoa is AoANet (refiner of model.encoder_layers
self-attention layers with attention on attention; LSTM decoder attending with
model.num_heads heads; vanilla, caca or light_caca with one history per head), its recipe in
configs/models/aoanet.yaml (label smoothing 0.2, train.grad_clip_mode=value clamps every
gradient at train.grad_clip): aoanet_caca.yaml, aoanet_light_caca.yaml; docs/aoanet.md.
model.encoder=vlp_regions model.decoder=vlp is VLP's one-stream model (model.decoder_layers
shared layers; configs/models/vlp_small.yaml, vlp.yaml); train.mlm.enabled=true pre-trains it by
masked-token prediction (train.mlm.rate, seq2seq_ratio; at D=256 with train.schedule.factor=0.25:
the default rate makes pre-training hurt, benchmarks/results/vlp.md), train.init_from=<that run>/last then
fine-tunes it for captions, and `catcap vqa` for questions; its region embedding adds box
geometry with model.region_geometry=true and, on catcap extract grids, each cell's ImageNet
class probabilities with model.region_classes=efficientnet-lite0 (the extracting encoder; both:
configs/models/vlp_region_terms.yaml); docs/vlp.md.
Objective: train.objective=xe|scst|xe_then_scst (self-critical training with the CIDEr-D
reward; train.scst.* settings, train.init_from=CHECKPOINT to start from XE weights: SCST
scores them first and keeps them as best/ until an SCST epoch beats them).
See docs/cat.md and docs/scst.md.

Scale: `torchrun --nproc_per_node=N -m catcap train --config ...` trains on N processes (GPUs
with nccl, CPU processes with gloo); train.batch_size stays the global batch. --precision bf16
or fp16 (with a gradient scaler), train.accumulate=K micro-batches per step, train.compile=true.
See docs/distributed.md; CPU speed: docs/performance.md.

examples:
  catcap train --config configs/experiments/demo.yaml
  catcap train --config configs/experiments/coco_cat.yaml --device cuda --precision bf16
  torchrun --standalone --nproc_per_node=4 -m catcap train --config configs/experiments/coco_cat.yaml
  catcap train --config configs/experiments/demo.yaml train.epochs=3 model.d_model=64
  catcap train --config configs/experiments/demo.yaml --resume
  catcap train --config configs/experiments/demo.yaml model.cross_attention=caca train.awc.enabled=true
  catcap train --config configs/experiments/demo_scst.yaml          # SCST from the demo's model
  catcap train --config configs/models/cat.yaml data.dataset=D.json data.features=F.h5
  catcap train --config configs/models/m2_caca.yaml data.dataset=D.json data.features=F.h5
  catcap train --config configs/models/updown_caca.yaml data.dataset=D.json data.features=F.h5
  catcap train --config configs/experiments/flickr8k_aoanet.yaml
"""


VALIDATE_HELP = """\
Check an experiment config (YAML plus key=value overrides) the way `catcap train` does before
it starts, without training: unknown keys and wrong types are rejected with the valid
choices, then the data the config names is read (data.dataset's train and val splits, the
feature store's width against model.feature_dim, every image's features present) and
train.init_from, when set, must be a checkpoint. Prints the full config as YAML (every
default filled in) and one line per check. --no-data checks the config alone.

examples:
  catcap validate-config --config configs/experiments/flickr8k_cat.yaml
  catcap validate-config --config configs/models/cat.yaml data.dataset=D.json data.features=F.h5
  catcap validate-config --config configs/experiments/coco_cat.yaml --no-data > full_config.yaml
"""


DEMO_HELP = """\
The README's main command: makes the built-in shapes world, trains the tiny Transformer,
captions the test split with beam search, prints a metrics table next to a
"most frequent caption" baseline and a few images' captions next to their references.
Everything goes to --out (default runs/demo); an existing world there is reused.

With --compare, trains several model presets (configs/models/NAME.yaml: their encoder,
decoder, cross attention, memory slots and AWC settings, at the demo's tiny size) on the same
world and seed and prints one table, e.g. the Transformer, CAT (CACA + AWC), LightCAT
(LightCACA + AWC), M2 (memory-augmented encoder + meshed decoder) and M2 + CACA. An LSTM
preset (att2in, updown, lookback, aoanet and their _caca twins) also brings its training
recipe (step schedule, scheduled sampling, label smoothing, gradient clipping) and takes its
family's tiny sizes (aoanet_tiny.yaml for AoANet, updown_tiny.yaml for the others).

example:
  catcap demo
  catcap demo --out /tmp/demo train.epochs=2
  catcap demo --compare transformer,cat,lightcat
  catcap demo --compare transformer,cat,m2,m2_caca
  catcap demo --compare cat,updown,updown_caca
  catcap demo --compare transformer,cat,aoanet,aoanet_caca
"""


ABLATE_HELP = """\
Rerun one of the paper's ablation tables (SPEC.md §6) with one command: every row's config
(configs/ablations/tableN_*.yaml) is checked, trained (an interrupted run resumes, a finished
row is not retrained), evaluated on --split with beam search, and the table is printed next to
the paper's CIDEr-D and written to OUT/table.md and OUT/table.json.

  table 5  context strategies without AWC: TCA, +OHC, +IHC, +CHC
  table 6  shared vs not-shared CACA weights; 4 decoder layers with TCA and CACA
  table 7  AWC: none, fixed beta 0.1/0.3/0.5/0.7/0.9, adaptive

The configs train the paper-size model on COCO (configs/experiments/coco_transformer.yaml:
data/coco/dataset_coco.json + data/coco/features.h5); overrides apply to every row.

example:
  catcap ablate --table 5
  catcap ablate --table 7 data.dataset=/data/coco/dataset_coco.json data.features=/data/coco/bu.h5
  catcap ablate --table 5 --out /tmp/t5 data.dataset=runs/demo/world/dataset_shapes.json \\
      data.features=runs/demo/world/features.h5 model.d_model=128 model.num_heads=4 \\
      model.d_ff=256 train.epochs=8 train.schedule.warmup=600 data.min_count=1   # a quick look
"""


def register(sub) -> None:
    plot = sub.add_parser("plot-log", help="plot a training run's log (losses, val CIDEr-D, SCST signals)",
                          description="Draw RUN/log.jsonl into RUN/training.png: training loss, validation CIDEr-D per "
                          "epoch and, for self-critical training, reward vs baseline, entropy, caption length and the "
                          "fraction of samples ending with <eos> per step (an SCST collapse shows as entropy and length "
                          "falling while the reward stalls). `catcap train` draws it at the end of every run.\n\n"
                          "example:\n  catcap plot-log runs/demo/scst", formatter_class=argparse.RawDescriptionHelpFormatter)
    plot.add_argument("run", metavar="RUN", help="a run's out_dir (holds log.jsonl)")
    plot.add_argument("--out", metavar="FILE.png", help="where to write the picture: .png, .svg or .pdf "
                      "(default RUN/training.png)")
    paths.declare(plot, run=paths.reads("log.jsonl"), out=paths.OUTPUT)
    plot.set_defaults(func=cmd_plot_log)
    abl = sub.add_parser("ablate", help="rerun an ablation table of the paper (2, 5, 6 or 7)", description=ABLATE_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    abl.add_argument("--table", required=True, help="table number: 2, 5, 6 or 7")
    abl.add_argument("--out", metavar="DIR", help="where the rows' runs and the table go (default runs/ablations/tableN)")
    abl.add_argument("--split", default="test", help="split to evaluate (default test)")
    abl.add_argument("--beam", type=int, default=5, help="beam size (default 5, as in the paper)")
    abl.add_argument("overrides", nargs="*", metavar="key=value", help="overrides applied to every row")
    paths.declare(abl, out=paths.OUTPUT)
    abl.set_defaults(func=cmd_ablate)
    demo = sub.add_parser("demo", help="world -> train -> evaluate, in a few minutes", description=DEMO_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--out", default="runs/demo", metavar="DIR", help="where the world and the model go")
    demo.add_argument("--beam", type=int, default=3, help="beam size for the test captions (default 3)")
    demo.add_argument("--train-images", type=int, default=3000, help="training images of the world (default 3000)")
    demo.add_argument("--compare", metavar="A,B,..", default="",
                      help="model presets to train and compare, e.g. transformer,cat,m2,m2_caca")
    demo.add_argument("overrides", nargs="*", metavar="key=value", help="overrides of configs/experiments/demo.yaml")
    paths.declare(demo, out=paths.OUTPUT)
    demo.set_defaults(func=cmd_demo)
    syn = sub.add_parser("synth", help="make the built-in shapes world", description=SYNTH_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    syn.add_argument("--out", required=True, metavar="DIR", help="output folder (must be new or empty)")
    syn.add_argument("--train", type=int, default=3000, help="training images (default 3000)")
    syn.add_argument("--val", type=int, default=250, help="validation images (default 250)")
    syn.add_argument("--test", type=int, default=250, help="test images (default 250)")
    syn.add_argument("--seed", type=int, default=0, help="random seed; same seed, same world (default 0)")
    syn.add_argument("--feature-dim", type=int, default=2048, help="width of the region features (default 2048)")
    syn.add_argument("--overwrite", action="store_true", help="replace an existing world in --out")
    paths.declare(syn, out=paths.OUTPUT)
    syn.set_defaults(func=cmd_synth)
    for name, helptext, func, description, notes in (
            ("train", "train a captioner", cmd_train, TRAIN_HELP, TRAIN_NOTES),
            ("validate-config", "check an experiment config and its data without training", cmd_validate,
             VALIDATE_HELP, None)):
        p = sub.add_parser(name, help=helptext, description=description, epilog=notes,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--config", metavar="FILE.yaml", help="experiment config, e.g. configs/experiments/demo.yaml"
                       + (" (without it, data.dataset= and data.features= must be given)" if name == "train" else
                          " (defaults if omitted)"))
        p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.epochs=3")
        p.add_argument("--device", choices=["auto", "cpu", "cuda"],
                       help="where to train (= train.device; default auto: CUDA when there is one)")
        p.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                       help="= train.precision: fp32 (default), bf16 autocast, fp16 autocast + gradient scaler")
        if name == "train":
            p.add_argument("--resume", action="store_true", help="continue from out_dir/last")
        else:
            p.add_argument("--no-data", action="store_true", help="check the config only, not the data it names")
        paths.declare(p, config=paths.INPUT)
        p.set_defaults(func=func, config_paths=_config_paths)


def _config_paths(args) -> list:
    """The paths the experiment config names, with their roles (``out_dir`` against the data and
    ``train.init_from``: cli/checks.py)."""
    from catcap import api
    from catcap.config import path_fields

    cfg = api.load_experiment(args.config, _with_flags(args))
    return [paths.Named(key, value, paths.Role(**role)) for key, value, role in path_fields(cfg)]


def cmd_synth(args) -> int:
    from catcap import api

    paths = api.synth(args.out, num_train=args.train, num_val=args.val, num_test=args.test, seed=args.seed,
                      feature_dim=args.feature_dim, overwrite=args.overwrite)
    print(world_summary(paths, args.train + args.val + args.test, args.feature_dim))
    return 0


def world_summary(paths, images: int, feature_dim: int) -> str:
    """What ``catcap synth`` made and the command that trains on it."""
    return "\n".join([
        f"world written to {paths.root} ({images} images)",
        f"  images    {paths.images}",
        f"  captions  {paths.dataset}  (Karpathy format: train/val/test splits)",
        f"  features  {paths.features}  (region features, HDF5)",
        f"  recipe    {paths.info}",
        "train on it:",
        f"  catcap train --config configs/experiments/demo.yaml data.dataset={paths.dataset} "
        f"data.features={paths.features} model.feature_dim={feature_dim} out_dir=runs/{Path(paths.root).name}",
    ])


def _with_flags(args) -> list[str]:
    """The overrides plus --device / --precision (the flags win over a key=value of the same key)."""
    extra = [f"train.{k}={v}" for k, v in (("device", args.device), ("precision", args.precision)) if v]
    return list(args.overrides) + extra


def cmd_validate(args) -> int:
    from catcap import api

    cfg = api.load_experiment(args.config, _with_flags(args))
    print(api.config_yaml(cfg), end="")
    print("config OK: the settings parse and agree" + ("" if args.no_data else "; checking its data files ..."),
          file=sys.stderr)
    if not args.no_data:
        for line in api.check_experiment_data(cfg):
            print(line, file=sys.stderr)
    return 0


def cmd_train(args) -> int:
    from catcap import api

    from catcap.training.distributed import is_main_process

    overrides = _with_flags(args)
    given = {o.split("=", 1)[0].strip() for o in overrides}
    if args.config is None and not {"data.dataset", "data.features"} <= given:
        raise ValueError("no --config: catcap train needs an experiment config, e.g. --config "
                         "configs/experiments/demo.yaml (the demo's world, after `catcap demo`) or a model preset with "
                         "your data: --config configs/models/cat.yaml data.dataset=D.json data.features=F.h5; the "
                         "configs are in configs/experiments/ and configs/models/ (catcap train --help)")
    pos = api.train(args.config, overrides, resume=args.resume)
    if not is_main_process():  # under torchrun, rank 0 reports
        return 0
    if pos.best_epoch > 0:
        best = f"best val CIDEr-D {pos.best_cider:.4f} (epoch {pos.best_epoch})"
    elif pos.best_epoch == 0:
        best = (f"best val CIDEr-D {pos.best_cider:.4f}: the start weights (train.init_from); no SCST epoch "
                "beat them, so best/ holds them")
    else:
        best = "no validation ran (train.max_steps ended the run inside the first epoch)"
    print(f"done: {pos.step} steps, {best}")
    from catcap.viz.training_curves import plot_if_logged

    plot = plot_if_logged(api.load_experiment(args.config, overrides).out_dir)
    print(f"training curves: {plot}" if plot else "training curves: nothing logged yet (train.log_every is "
          "larger than the steps run), no plot")
    return 0


def cmd_plot_log(args) -> int:
    from catcap.viz.training_curves import draw_training_log

    drawn = draw_training_log(args.run, args.out)
    print(f"wrote {drawn.path}")
    if drawn.problems:  # drawn under a new name: the picture of a complete log is never replaced by this one
        shown = "; ".join(drawn.problems[:5]) + (f" ... ({len(drawn.problems)} in all)" if len(drawn.problems) > 5 else "")
        print(f"catcap plot-log: {Path(args.run) / 'log.jsonl'} has {len(drawn.problems)} bad line(s), left out: "
              f"{shown}; drew the rest into {drawn.path}, {drawn.kept} is left as it was", file=sys.stderr)
    return checks.exit_status(1, len(drawn.problems))


def cmd_ablate(args) -> int:
    from catcap import api

    api.ablate(args.table, args.overrides, out_root=args.out, split=args.split, beam=args.beam)
    return 0


def cmd_demo(args) -> int:
    from catcap import api

    compare = [name.strip() for name in args.compare.split(",") if name.strip()]
    api.demo(args.out, num_train=args.train_images, overrides=args.overrides, beam=args.beam, compare=compare)
    return 0
