"""``catcap evaluate`` and ``catcap compare``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from catcap.cli.generation_args import add_generation_arguments, checkpoints, generation_config, given_generation_flags
from catcap.cli import paths

EVALUATE_HELP = """\
Score captions exactly as the COCO caption toolkit (pycocoevalcap 1.2) does:
PTB tokenisation, BLEU-1..4, METEOR, ROUGE-L, CIDEr (= CIDEr-D) and SPICE.

RESULTS is the COCO result format: [{"image_id": 42, "caption": "a dog ..."}, ...]
with one caption per image, or what `catcap caption --out F.jsonl` (or --json) writes (a
record with only its "image" path gets its id from REFS's file names, else from the file
name, e.g. a Flickr photo id). REFS is either COCO annotations (captions_val2014.json)
or a Karpathy split file (dataset_coco.json) together with --split.
Only the images in RESULTS are scored. BLEU/ROUGE-L/CIDEr need no Java;
METEOR needs Java; SPICE needs Java and the Stanford CoreNLP 3.6.0 jars (--corenlp).
A metric that cannot run is reported as unavailable, with the reason; the exit status
is then 1 if you named it in --metrics (0 when it was only part of the default set).

A large split in pieces (--checkpoint): --shard I/N captions block I of N (from 0) of the split into
RESULTS.part-III-of-NNN.json (--save-results is required); no scores are printed, as they need every
caption: once all shards are done, catcap merge RESULTS.json joins the parts into the file one
process would have saved (byte for byte), then score it with catcap evaluate --results RESULTS.json
--refs DATASET.json --split SPLIT. Under torchrun (torchrun --nproc_per_node=4 -m catcap evaluate
--checkpoint ... --save-results r.json) each rank takes its block and rank 0 merges and scores.

examples:
  catcap evaluate --example
  catcap evaluate --results val_results.json --refs captions_val2014.json
  catcap evaluate --results test.json --refs dataset_coco.json --split test \\
                  --metrics bleu,rouge,cider --output scores.json
  catcap evaluate --results captions.jsonl --refs data/flickr8k/dataset_flickr8k.json --split val
  catcap evaluate --checkpoint runs/demo/model/best --split test --save-results test_results.json
  catcap evaluate --checkpoint flickr8k-m2 --images ../shared/data/flickr8k/images \
                  --refs data/flickr8k/dataset_flickr8k.json --split val --beam 3
  catcap evaluate --checkpoint runs/demo/model/best --split test --save-results test_results.json --shard 0/2
  catcap evaluate --checkpoint flickr8k-m2 --checkpoint flickr8k-cat --split val

--checkpoint decodes with GenerationConfig's defaults (beam 3, at most 20 words, as the bundled models'
cards) unless the generation flags say otherwise (docs/generation.md). Several --checkpoint (or
A,B) decode as one ensemble, each model reading its own checkpoint's feature store.
"""

COMPARE_HELP = """\
Is system B really better than system A? Paired bootstrap over images: both result
files are scored on the same resampled image sets; per metric you get B - A, its 95%
interval and a two-sided p-value. Corpus BLEU is recomputed exactly on each resample.

example:
  catcap compare baseline.json cat.json --refs captions_val2014.json --metrics bleu,rouge,cider
"""


def _add_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--refs", metavar="REFS.json", help="COCO annotations or a Karpathy split file")
    p.add_argument("--split", help="split to use when REFS is a Karpathy file (train/val/test/restval)")
    p.add_argument("--metrics", help="comma-separated subset of bleu,meteor,rouge,cider,cider-plain,spice "
                   "(default: bleu,meteor,rouge,cider,spice)")
    p.add_argument("--corenlp", metavar="DIR", help="folder with stanford-corenlp-3.6.0.jar and "
                   "stanford-corenlp-3.6.0-models.jar for SPICE (or set CATCAP_CORENLP_DIR)")


def register(sub) -> None:
    ev = sub.add_parser("evaluate", help="score captions, or a model on a split (COCO-exact metrics)",
                        description=EVALUATE_HELP,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ev.add_argument("--results", metavar="RESULTS.json", help="COCO-format results, one caption per image, or catcap "
                    "caption's JSON Lines")
    _add_refs(ev)
    ev.add_argument("--output", metavar="SCORES.json", help="write corpus and per-image scores here")
    ev.add_argument("--example", action="store_true", help="score the bundled example (50 COCO val2014 images, "
                    "a held-out human caption against the other references)")
    ev.add_argument("--quiet", action="store_true", help="print only the table")
    ev.add_argument("--checkpoint", metavar="DIR", action="append",
                    help="caption --split (default test) of the checkpoint's dataset with this trained model, then "
                         "score it; repeat it (or A,B) for an ensemble of the models")
    ev.add_argument("--device", choices=["auto", "cpu", "cuda"],
                    help="with --checkpoint: where the model runs (default auto: CUDA when there is one)")
    ev.add_argument("--dtype", choices=["fp32", "bf16", "fp16"],
                    help="with --checkpoint: the weights' dtype while decoding (default fp32). bf16 decodes faster on "
                         "CPUs with bf16 instructions (AVX512_BF16, AMX) and on recent GPUs; scores stay within a few "
                         "tenths of a point (docs/distributed.md, 'Decoding in reduced precision')")
    ev.add_argument("--precision", choices=["fp32", "bf16", "fp16"],
                    help="with --checkpoint: decode under this autocast, the weights kept fp32 (default fp32). bf16 "
                         "took 0.59x the fp32 time on this project's AMD EPYC (AVX512_BF16) with CIDEr-D within "
                         "0.5%% (docs/distributed.md); --dtype bf16 also narrows the weights")
    ev.add_argument("--save-results", metavar="RESULTS.json", help="with --checkpoint: write the COCO-format results")
    ev.add_argument("--shard", metavar="I/N", help="with --checkpoint: caption only block I of N of the split into "
                    "the part RESULTS.part-III-of-NNN.json of --save-results; join with catcap merge RESULTS.json")
    ev.add_argument("--features", metavar="STORE", help="with --checkpoint: the feature store to caption from "
                    "(default: the checkpoint's data.features; --refs likewise replaces its data.dataset)")
    ev.add_argument("--images", metavar="DIR", help="with --checkpoint: caption the split from its photos in DIR, run "
                    "through the checkpoint's own image encoder (extracted once into catcap's cache), instead of "
                    "a feature store")
    add_generation_arguments(ev)
    paths.declare(ev, results=paths.INPUT, refs=replace(paths.INPUT, default=paths.checkpoint_data("dataset")),
                  corenlp=paths.INPUT, output=paths.OUTPUT, checkpoint=paths.CHECKPOINTS, save_results=paths.OUTPUT,
                  features=replace(paths.INPUT, default=paths.checkpoint_data("features")), images=paths.PHOTOS)
    ev.set_defaults(func=cmd_evaluate)
    cmp = sub.add_parser("compare", help="paired bootstrap comparison of two result files", description=COMPARE_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("a", metavar="A.json", help="results of system A (the baseline)")
    cmp.add_argument("b", metavar="B.json", help="results of system B")
    _add_refs(cmp)
    cmp.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    cmp.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    paths.declare(cmp, a=paths.INPUT, b=paths.INPUT, refs=paths.INPUT, corenlp=paths.INPUT)
    cmp.set_defaults(func=cmd_compare)


def log_to_stderr(quiet: bool):
    return (lambda msg: None) if quiet else (lambda msg: print(f"[catcap] {msg}", file=sys.stderr))


def cmd_evaluate(args) -> int:
    from catcap import api
    from catcap.metrics.evaluate import print_table

    generation = generation_config(args)  # a bad setting is named first, whatever else is wrong
    checkpoint_only = given_generation_flags(args) + [
        flag for flag, value in (("--device", args.device), ("--save-results", args.save_results),
                                 ("--features", args.features), ("--shard", args.shard), ("--dtype", args.dtype),
                                 ("--images", args.images), ("--precision", args.precision)) if value is not None]
    if args.checkpoint and (args.results or args.example):
        raise ValueError("give --checkpoint (caption a split, then score it) or --results/--example "
                         "(score captions you have), not both")
    if checkpoint_only and not args.checkpoint:
        raise ValueError(f"{', '.join(checkpoint_only)} only appl{'ies' if len(checkpoint_only) == 1 else 'y'} with "
                         "--checkpoint (they say how to caption a split; --results files are captioned already)")
    if args.checkpoint:
        from catcap.sharding import resolve_shard

        ev, _ = api.evaluate_checkpoint(checkpoints(args.checkpoint), split=args.split or "test",
                                        generation=generation, metrics=args.metrics,
                                        dataset=args.refs, features=args.features,
                                        save_results=args.save_results, corenlp_dir=args.corenlp,
                                        log=log_to_stderr(args.quiet), device=args.device or "auto",
                                        progress=not args.quiet, shard=resolve_shard(args.shard),
                                        dtype=args.dtype, precision=args.precision or "fp32", images=args.images)
        if ev is None:  # a shard: its part is written; the scores come from the merged file
            return _shard_done(args)
        print_table(ev)
        _write_scores(ev, args.output)
        return _status(ev, args.metrics)
    if args.example:
        results, refs = api.example_files()
    elif args.results and args.refs:
        results, refs = args.results, args.refs
    else:
        raise ValueError("give --results and --refs (or --example, or --checkpoint); "
                         "see catcap evaluate --help")
    ev = api.evaluate(results, refs, split=args.split, metrics=args.metrics, corenlp_dir=args.corenlp,
                      log=log_to_stderr(args.quiet))
    print_table(ev)
    _write_scores(ev, args.output)
    return _status(ev, args.metrics)


def _shard_done(args) -> int:
    """What a shard of --checkpoint prints (torchrun's other ranks: nothing, rank 0 scores)."""
    from catcap.sharding import part_path, resolve_shard, torchrun_shard

    if torchrun_shard() is None:
        shard = resolve_shard(args.shard)
        refs = args.refs or "DATASET.json"
        print(f"{part_path(args.save_results, shard)}: shard {shard} captioned; when all {shard.count} are done: "
              f"catcap merge {args.save_results}, then catcap evaluate --results {args.save_results} --refs {refs} "
              f"--split {args.split or 'test'}")
    return 0


def _status(ev, asked: str | None) -> int:
    """1 when a metric named in --metrics could not run (the table says why), else 0."""
    if asked and ev.unavailable:
        print(f"requested but unavailable: {', '.join(sorted(ev.unavailable))} (see the table)", file=sys.stderr)
        return 1
    return 0


def _write_scores(ev, output) -> None:
    from catcap import api

    if output:
        api.write_json_atomic(output, ev.to_json())
        print(f"scores written to {output}", file=sys.stderr)


def cmd_compare(args) -> int:
    from catcap import api
    from catcap.metrics.bootstrap import format_comparison

    if not args.refs:
        raise ValueError("give --refs (the references both result files are scored against); "
                         "see catcap compare --help")
    rows = api.compare(args.a, args.b, args.refs, split=args.split, metrics=args.metrics, resamples=args.resamples,
                       seed=args.seed, corenlp_dir=args.corenlp, log=log_to_stderr(False))
    print(format_comparison(rows, "A", "B"))
    print(f"({args.resamples} paired resamples, seed {args.seed}; A = {args.a}, B = {args.b})")
    return 0


