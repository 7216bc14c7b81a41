"""``catcap merge``: join the parts of a sharded extract, caption or evaluate run."""

from __future__ import annotations

import argparse
import sys

from catcap.cli import paths

MERGE_HELP = """\
Join the parts that sharded runs (--shard I/N, or torchrun without its automatic merge) left next
to OUT into OUT itself: the file one process would have written. OUT is the path the sharded
command was given; its parts are found beside it (OUT.part-000-of-004.h5 ... for 4 shards).
Every part must be there and finished (a .partial part means that shard is still running or was
interrupted: run it again first, it continues), and all must be of one kind, from one run.

  OUT.h5 / .hdf5   a feature store (catcap extract): the parts' images in order, written by the
                   same writer, so the merge is byte for byte the one-process store; all parts
                   must come from the same encoder and --dataset keys; OUT.errors.txt lists the
                   unreadable images of every part. An existing OUT is continued (its images are
                   kept, the parts' new ones added), or replaced with --replace.
  OUT.jsonl        caption results (catcap caption --output): the parts' lines in shard order.
  OUT.json         COCO results (catcap evaluate --checkpoint --save-results): byte for byte the
                   one-process file; score it with catcap evaluate --results OUT --refs ...

The parts (and their .errors.txt lists) are removed after a successful merge; --keep-parts keeps them.

examples:
  catcap merge feats.h5
  catcap merge test_results.json --keep-parts
  catcap merge captions.jsonl
"""


def register(sub) -> None:
    mrg = sub.add_parser("merge", help="join the parts of a sharded extract / caption / evaluate run",
                         description=MERGE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    mrg.add_argument("out", metavar="OUT", help="the output path the sharded command was given (.h5, .jsonl, .json)")
    mrg.add_argument("--keep-parts", action="store_true", help="keep the parts after merging (default: remove them)")
    mrg.add_argument("--replace", action="store_true",
                     help="a feature store: replace an existing OUT instead of adding the parts to it")
    mrg.add_argument("--quiet", action="store_true", help="print only the summary line")
    paths.declare(mrg, out=paths.OUTPUT)  # its inputs are the parts found beside OUT
    mrg.set_defaults(func=cmd_merge)


def cmd_merge(args) -> int:
    from catcap.merge import merge

    log = None if args.quiet else (lambda m: print(m, file=sys.stderr))
    res = merge(args.out, keep_parts=args.keep_parts, replace=args.replace, log=log)
    kept = "kept" if args.keep_parts else "removed"
    extra = f", {res.skipped} already there" if res.skipped else ""
    print(f"{res.out}: {len(res.parts)} parts merged ({res.items} entries{extra}); parts {kept}")
    if res.hint:
        print(res.hint)
    return 0
