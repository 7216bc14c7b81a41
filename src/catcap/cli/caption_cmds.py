"""``catcap caption``: images in, captions out (stdout, or a resumable JSON Lines file)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from catcap.cli.generation_args import add_generation_arguments, checkpoints, generation_config
from catcap.cli import checks, paths
from catcap.threads import photo_readers

CAPTION_HELP = """\
Caption images with a trained model. Without --checkpoint, the model bundled with catcap
(zoo/flickr8k-m2, else the zoo's first: `catcap zoo list`; docs/zoo.md) captions them, and catcap says so on
stderr. A folder stands for its image files (sorted by name). A model trained on features
from `catcap extract` captions photo files directly: the checkpoint records the image encoder
and its preprocessing, and the photos go through exactly that. For other models (e.g. the
built-in world's detector-like features) name images by their key in the feature store or by
an image file whose name (without extension) is the key, e.g. a built-in world's images/12.png.
--json prints [{"image": ..., "image_id": ..., "caption": ...}, ...] instead of "image: caption"
lines: records that `catcap evaluate`, `compare`, `report` and `human-eval` read as they are.
image_id is the id the reference file gives the photo (--refs REFS.json: a Karpathy split file
or COCO annotations), else the one its file name carries (a Flickr photo id,
1000268201_693b08cb0e.jpg -> 1000268201, as `catcap import` numbers Flickr8k; a COCO file name's
id); a feature-store key is its own id.
--checkpoint A,B captions with an ensemble of the models (their log-probabilities averaged at
every step; docs/generation.md). Decoding: beam 3, at most 20 words, unless the generation
flags say otherwise (docs/generation.md lists every setting).

Thousands of photos: reading the JPEGs (--workers processes), the image encoder and the caption
decoder run as a pipeline (the encoder of one batch overlaps the decoding of the one before,
with bounded queues: memory stays flat), with a progress bar in images/s on stderr. An image
that cannot be read is reported on stderr and skipped, never stopping the run; the exit status
is then 1, or 2 when not one image could be read (nothing is written; docs/cli.md).

--out FILE.jsonl writes one line per image, in input order: {"image": ..., "image_id": ...,
"caption": ...} (plus "error" for an unreadable image, with "caption": null). Lines are appended to
FILE.jsonl.partial after every batch and the file is renamed into place at the end, so an
interrupted run continues where it stopped when the same command runs again (a partial made
with another model, --beam, --max-len, --batch-size or other inputs is refused). A finished
FILE.jsonl is left alone unless --restart. --shard I/N captions block I of N (from 0) into
FILE.part-III-of-NNN.jsonl; once shards 0/4 to 3/4 are done, `catcap merge captions.jsonl`
joins the parts into captions.jsonl (docs/pipeline.md).

example:
  catcap caption photo.jpg
  catcap caption --json photos/ another.jpg
  catcap caption --checkpoint runs/flickr8k/cat/best my_photo.jpg another.jpg
  catcap caption --checkpoint runs/demo/model/best runs/demo/world/images/3251.png 3252
  catcap caption photos/ --out captions.jsonl
  catcap caption photos/ --out captions.jsonl --refs data/flickr8k/dataset_flickr8k.json
  catcap caption photos/ --out captions.jsonl --restart --beam 5 --max-len 16
  catcap caption --checkpoint flickr8k-m2,flickr8k-cat photo.jpg
  catcap caption --beam 6 --num-beam-groups 3 --diversity-penalty 0.5 photo.jpg
  catcap caption photos/ --out captions.jsonl --shard 0/4 --workers 1
"""


def register(sub) -> None:
    cap = sub.add_parser("caption", help="caption photos (default model: the bundled flickr8k-m2)",
                         description=CAPTION_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    cap.add_argument("--checkpoint", metavar="DIR", help="a checkpoint written by catcap train, a zoo model's name or "
                     "folder, or a Hugging Face Hub id (default: the bundled model, zoo/flickr8k-m2); A,B: an "
                     "ensemble of those models")
    cap.add_argument("--json", action="store_true", help='print JSON: [{"image": ..., "caption": ...}, ...]')
    cap.add_argument("--out", "--output", dest="out", metavar="FILE.jsonl",
                     help="write JSON Lines there instead of printing: incrementally, continued when rerun")
    cap.add_argument("--restart", action="store_true",
                     help="with --out: caption everything again (default: continue a partial, keep a finished file)")
    cap.add_argument("--shard", metavar="I/N", help="caption only block I of N (0 <= I < N) into --out's part "
                     "FILE.part-III-of-NNN.jsonl; join the parts with catcap merge FILE.jsonl")
    cap.add_argument("--features", metavar="STORE", help="feature store (default: the checkpoint's data.features)")
    cap.add_argument("--refs", metavar="REFS.json", help="a Karpathy split file or COCO annotations: each photo's "
                     "image_id in the output is the one this file gives its file name (default: the id the file "
                     "name carries, e.g. a Flickr photo id)")
    cap.add_argument("--batch-size", type=int, default=16, help="images per batch (default 16)")
    cap.add_argument("--workers", type=int, default=photo_readers(),
                     help="processes reading and decoding the photos (default 1 on a machine with 2 cores or "
                          "fewer, else 2; 0 = in the encoder's thread). On 2 cores, 1 worker left the encoder "
                          "and decoder more room: 49 against 47 photos/s (benchmarks/results/pipeline.md)")
    cap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default auto)")
    cap.add_argument("--quiet", action="store_true", help="no progress bar")
    cap.add_argument("images", nargs="+", metavar="IMAGE", help="image files, folders of them, or feature-store keys")
    add_generation_arguments(cap)
    paths.declare(cap, checkpoint=replace(paths.CHECKPOINTS, default=_bundled_folder), out=paths.OUTPUT,
                  features=replace(paths.INPUT, default=paths.checkpoint_data("features", _bundled_folder)),
                  images=paths.PHOTOS, refs=paths.INPUT)
    cap.set_defaults(func=cmd_caption)


def _bundled_folder(args) -> str | None:
    """The model captioning without --checkpoint (an input like any other; None: none is bundled,
    which the command itself then explains)."""
    from catcap import api

    try:
        return str(api.bundled_model().path)
    except ValueError:
        return None


def _log(message: str) -> None:
    print(f"catcap caption: {message}", file=sys.stderr)


def _shard(args):
    """The shard this process captions; a sharded run without --out is refused."""
    from catcap.sharding import resolve_shard

    shard = resolve_shard(args.shard)
    if not shard.whole and args.out is None:
        raise ValueError(f"shard {shard} of a caption run needs --out FILE.jsonl (each shard writes its part "
                         "next to it, and catcap merge joins them); found no --out")
    return shard


def cmd_caption(args) -> int:
    from catcap import api

    if args.batch_size < 1 or args.workers < 0:
        raise ValueError(f"expected --batch-size >= 1 and --workers >= 0, found {args.batch_size}, {args.workers}")
    if args.restart and args.out is None:
        raise ValueError("--restart goes with --out FILE.jsonl (it captions the file again); found no --out")
    shard = _shard(args)
    generation = generation_config(args)
    checkpoint = checkpoints(args.checkpoint)
    if checkpoint is None:
        entry = api.bundled_model()
        checkpoint = [entry.path]
        _log(f"using the bundled model {entry.name} ({entry.path}; --checkpoint picks another)")
    job = api.prepare_caption(checkpoint, args.images, features=args.features, generation=generation,
                              device=args.device, shard=shard, refs=args.refs)
    _note_missing_ids(job, args)
    try:
        if args.out is not None:
            return _to_file(api, job, args, shard)
        return _print(api, job, args)
    finally:
        job.close()


def _note_missing_ids(job, args) -> None:
    """Say once when some results will have no image_id (scoring them then needs the ids)."""
    if args.out is None and not args.json:
        return
    missing = [item for item, image_id in zip(job.items, job.image_ids) if image_id is None]
    if missing:
        where = f"{args.refs} does not list them and their" if args.refs else "their"
        _log(f"{len(missing)} of {len(job.items)} images get no image_id ({where} file names carry none, e.g. "
             f"{missing[0]}); to score the captions, pass --refs REFS.json (the references that list these files)")


def _to_file(api, job, args, shard) -> int:
    from catcap.sharding import part_path

    out = part_path(args.out, shard)
    if not job.items:
        _log(f"shard {shard} has no images (fewer images than shards); writing an empty {out}")
    from catcap.merge import finish_sharded

    result = api.caption_to_file(job, out, restart=args.restart, batch_size=args.batch_size, workers=args.workers,
                                 progress=not args.quiet, log=_log)
    for image, error in result.errors:
        _log(f"cannot read {image}: {error} (skipped)")
    if result.out is not None:
        kept = f" ({result.done_before} kept from the interrupted run)" if result.done_before else ""
        _log(f"wrote {result.done_before + result.captioned} captions to {result.out}{kept}"
             + (f"; {len(result.errors)} unreadable" if result.errors else ""))
    elif result.errors:
        _log(f"error: not one of the {len(result.errors)} images could be read (listed above); wrote nothing "
             f"({out} is as it was)")
        return 2
    merged = finish_sharded(args.out, shard, log=_log)  # torchrun: every rank waits, rank 0 merges; --shard: how to merge
    from catcap.sharding import torchrun_shard

    if torchrun_shard() is not None and merged is None:
        return 0  # another rank: rank 0 reports the whole job from the merged file
    return _file_status(args.out if merged is not None else out)


def _file_status(path) -> int:
    """The exit status a finished caption file gives (docs/cli.md): 1 when some of its rows are
    images that could not be read (this run's, or kept from an interrupted one), else 0."""
    with open(path, encoding="utf-8") as f:
        failed = total = 0
        for line in f:
            if line.strip():
                total += 1
                failed += "error" in json.loads(line)
    return checks.exit_status(total - failed, failed)


def _print(api, job, args) -> int:
    """stdout as before the pipeline: ``image: caption`` lines as each batch finishes, or one JSON list."""
    rows, failed = [], 0
    for c in api.caption_stream(job, progress=not args.quiet, batch_size=args.batch_size, workers=args.workers):
        if c.error is not None:
            _log(f"cannot read {c.image}: {c.error} (skipped)")
            failed += 1
        if args.json:
            rows.append(c.to_json())
        elif c.error is None:
            print(f"{c.image}: {c.caption}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
    if failed == len(job.items):
        _log(f"error: not one of the {failed} images could be read (listed above)")
    elif failed:
        _log(f"captioned {len(job.items) - failed} of {len(job.items)} images; {failed} could not be read "
             "(listed above)")
    return checks.exit_status(len(job.items) - failed, failed)
