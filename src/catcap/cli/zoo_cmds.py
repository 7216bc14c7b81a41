"""``catcap zoo build | rebuild | list``: the models bundled with catcap (docs/zoo.md)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from catcap.cli import paths

ZOO_HELP = """\
The model zoo: trained captioners bundled in the repository's zoo/ folder (another folder
with --zoo or CATCAP_ZOO), each with fp16 weights, config, vocabulary and a model card that
records the sha256 of its files, its recipe and its validation scores. `catcap caption
photo.jpg` uses zoo/flickr8k-m2 (M2 + SCST, the best on Flickr8k val); Captioner.from_pretrained("flickr8k-cat")
loads catcap's CAT, and `catcap caption --checkpoint flickr8k-cat photo.jpg` captions with it.

example:
  catcap zoo list
  catcap zoo build flickr8k-cat --from runs/flickr8k/cat/best --scores runs/flickr8k/cat_val_beam3.json
  catcap zoo rebuild flickr8k-cat --dry-run
"""

BUILD_HELP = """\
Write zoo/NAME from a trained checkpoint, atomically: fp16 model.safetensors (at most 25 MB),
config.json (experiment config + the image encoder's meta), vocab.json and README.md, the
model card, filled from the checkpoint, its run's log.jsonl (training time) and --scores (a
`catcap evaluate --output` file). The same checkpoint gives byte-identical files. The card
records the recipe (--recipe, once per command in order; default: `catcap train --config
configs/experiments/<name>.yaml` for the run and the runs it started from, when those files
exist), the evaluation command (--eval-command; default: `catcap evaluate --checkpoint
CHECKPOINT --split val --beam 3 --output SCORES`) and this build command, which `catcap zoo
rebuild` reruns. --record-captions FILE writes the new model's greedy captions of the photos
FILE lists into it (the bundled model's test: tests/zoo/flickr8k_cat_captions.json).

example:
  catcap zoo build flickr8k-cat --from runs/flickr8k/cat/best --scores runs/flickr8k/cat_val_beam3.json \\
      --recipe "catcap train --config configs/experiments/flickr8k_cat.yaml" \\
      --record-captions tests/zoo/flickr8k_cat_captions.json
"""

REBUILD_HELP = """\
Recreate zoo/NAME by rerunning the recipe its model card records, from the repository root:
the training command(s), the evaluation, then `catcap zoo build`. Training is deterministic
(fixed seeds and batch order), so on the same machine and thread count the weights come back
the same. It retrains from scratch: for the Flickr8k models that takes about an hour or more
on 2 CPU cores (benchmarks/flickr8k.md), and it overwrites the runs the recipe names.
--dry-run prints the commands without running them.

example:
  catcap zoo rebuild flickr8k-cat --dry-run
  catcap zoo rebuild flickr8k-cat
"""


def register(sub) -> None:
    zoo = sub.add_parser("zoo", help="the bundled models: list, build from a checkpoint, rebuild by recipe",
                         description=ZOO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = zoo.add_subparsers(dest="zoo_command", metavar="ACTION")
    zoo.set_defaults(func=lambda args: (zoo.print_help(), 0)[1])

    def add_root(p):
        p.add_argument("--zoo", metavar="DIR", help="the zoo folder (default: $CATCAP_ZOO or the repository's zoo/)")

    ls = actions.add_parser("list", help="the bundled models with their sizes and scores",
                            description="The zoo's models: name, size of the weights, validation BLEU-4 and CIDEr-D "
                            "(x100) from the card, folder; * marks the one `catcap caption` uses.\n\nexample:\n"
                            "  catcap zoo list", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_root(ls)
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    paths.declare(ls, zoo=paths.INPUT)
    ls.set_defaults(func=cmd_list)
    build = actions.add_parser("build", help="write zoo/NAME from a checkpoint", description=BUILD_HELP,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("name", metavar="NAME", help="the zoo name, e.g. flickr8k-cat")
    build.add_argument("--from", dest="checkpoint", required=True, metavar="CHECKPOINT_DIR",
                       help="a checkpoint written by catcap train (e.g. runs/flickr8k/cat/best)")
    build.add_argument("--scores", metavar="EVAL.json", help="validation scores: a `catcap evaluate --output` file")
    build.add_argument("--recipe", action="append", default=[], metavar="COMMAND",
                       help="a command of the recipe that trains the checkpoint (repeat, in order)")
    build.add_argument("--eval-command", metavar="COMMAND", help="the command that wrote --scores")
    build.add_argument("--training-time", metavar="TEXT", help="training time for the card (default: estimated "
                       "from the runs' log.jsonl)")
    build.add_argument("--commit", metavar="TEXT", help="the commit for the card (default: this checkout's)")
    build.add_argument("--limit", action="append", default=[], metavar="TEXT", help="a known limit to add to the card")
    build.add_argument("--max-mb", type=float, default=25.0, help="largest model.safetensors allowed (default 25)")
    build.add_argument("--record-captions", metavar="FILE.json",
                       help="write the new model's captions of the photos FILE lists into FILE")
    add_root(build)
    # the zoo folder gets NAME; --record-captions is read (the photos it lists) and written (their captions)
    paths.declare(build, checkpoint=paths.CHECKPOINT, scores=paths.INPUT, record_captions=paths.INPUT_OUTPUT,
                  zoo=ZOO_OUTPUT)
    build.set_defaults(func=cmd_build)
    rebuild = actions.add_parser("rebuild", help="recreate zoo/NAME by rerunning its recorded recipe",
                                 description=REBUILD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    rebuild.add_argument("name", metavar="NAME", help="a bundled model, e.g. flickr8k-cat")
    rebuild.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    add_root(rebuild)
    paths.declare(rebuild, zoo=ZOO_OUTPUT)
    rebuild.set_defaults(func=cmd_rebuild)


def _default_zoo(args) -> str:
    from catcap import zoo

    return str(zoo.zoo_root(None))


ZOO_OUTPUT = paths.Role("output", names=lambda args: [args.name], default=_default_zoo)  # writes zoo/NAME


def cmd_list(args) -> int:
    import json

    from catcap import zoo

    entries = zoo.list_models(args.zoo)
    if args.json:
        print(json.dumps([{"name": e.name, "path": str(e.path), "bytes": e.size, "scores": e.scores}
                          for e in entries], indent=1))
        return 0
    if not entries:
        print(f"no model is bundled in {zoo.zoo_root(args.zoo)}: " + zoo.how_to_get(), file=sys.stderr)
        return 0
    print(f"{'':2}{'name':<24}{'size':>9}{'BLEU-4':>8}{'CIDEr-D':>9}  folder")
    for i, e in enumerate(entries):
        score = {k: (f"{100 * float(e.scores[k]):.1f}" if k in e.scores else "-") for k in ("Bleu_4", "CIDEr")}
        print(f"{'*' if i == 0 else ' ':2}{e.name:<24}{e.size / 1e6:>7.1f}MB{score['Bleu_4']:>8}{score['CIDEr']:>9}  "
              f"{e.path}")
    return 0


def cmd_build(args) -> int:
    from catcap import api

    folder = api.zoo_build(args.name, args.checkpoint, scores=args.scores, recipe=args.recipe,
                           eval_command=args.eval_command, commit=args.commit, training_time=args.training_time,
                           limits=args.limit, root=args.zoo, max_mb=args.max_mb, record_captions=args.record_captions)
    from catcap import zoo

    card = zoo.read_card(folder)
    size = (folder / "model.safetensors").stat().st_size
    print(f"zoo model written to {folder} ({size / 1e6:.1f} MB, sha256 {card['sha256']['model.safetensors']})")
    if args.record_captions:
        print(f"captions recorded in {args.record_captions}")
    return 0


def cmd_rebuild(args) -> int:
    from catcap import zoo

    commands = zoo.rebuild_commands(args.name, args.zoo)
    if args.dry_run:
        print(f"# from {zoo.REPO}")
        print("\n".join(commands))
        return 0
    env = dict(os.environ, **({zoo.ZOO_ENV: os.path.abspath(args.zoo)} if args.zoo else {}))
    for command in commands:
        print(f"[catcap zoo rebuild] {command}", file=sys.stderr, flush=True)
        done = subprocess.run(command, shell=True, cwd=zoo.REPO, env=env)
        if done.returncode != 0:
            print(f"catcap zoo rebuild: error: `{command}` exited with {done.returncode}; fix it and rerun (a "
                  "training command continues with --resume)", file=sys.stderr)
            return done.returncode
    return 0
