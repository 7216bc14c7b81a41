"""The ``catcap`` command. Each subcommand is a thin layer over :mod:`catcap.api`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from catcap import __version__
from catcap.malloc import keep_freed_memory
from catcap.progress import forget_bars
from catcap.threads import configure_threads
from catcap.cli import (analyze_cmds, caption_cmds, checks, data_cmds, extract_cmds, merge_cmds, metrics_cmds,
                        report_cmds, serve_cmds, train_cmds, vqa_cmds, zoo_cmds)


ABOUT = ("catcap: image captioning with the Context-Assisted Transformer (CAT), M2, AoANet, LSTM captioners\n"
         "and VLP; XE and self-critical training, beam search, COCO-exact metrics.")

# `catcap --help` lists the commands by task, in the order a newcomer meets them
SECTIONS = (
    ("caption, score and show (start here)", ("caption", "serve", "evaluate", "compare", "report", "human-eval")),
    ("train and study models", ("demo", "train", "validate-config", "ablate", "plot-log", "analyze", "vqa")),
    ("data and features", ("import", "prepare", "extract", "merge", "synth")),
    ("bundled models", ("zoo",)),
)
MORE = ("`catcap COMMAND --help` explains a command, with examples. First steps: README.md; every page: "
        "docs/README.md;\nthe process settings every command applies (threads, memory) and their switches: "
        "docs/performance.md.")


def command_list(sub) -> str:
    """The commands of ``sub`` grouped by :data:`SECTIONS`, each with its one-line help."""
    helps = {action.dest: action.help for action in sub._choices_actions}  # argparse's record of add_parser(help=)
    listed = [name for _, names in SECTIONS for name in names]
    if sorted(listed) != sorted(helps):
        raise AssertionError(f"catcap.cli.main.SECTIONS must list every command once: {sorted(helps)}")
    lines = []
    for title, names in SECTIONS:
        lines += ["", f"{title}:"] + [f"    {name:<17} {helps[name]}" for name in names]
    return "\n".join(lines[1:])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="catcap", usage="catcap [-h] [--version] COMMAND ...", epilog=MORE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"catcap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help=argparse.SUPPRESS, prog="catcap")
    caption_cmds.register(sub)
    serve_cmds.register(sub)
    metrics_cmds.register(sub)
    report_cmds.register(sub)
    train_cmds.register(sub)
    analyze_cmds.register(sub)
    vqa_cmds.register(sub)
    data_cmds.register(sub)
    extract_cmds.register(sub)
    merge_cmds.register(sub)
    zoo_cmds.register(sub)
    parser.description = f"{ABOUT}\n\n{command_list(sub)}"
    return parser


# a missing or existing path, a file where a folder was expected, ...: messages, not tracebacks
FILE_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, letting ``key=value`` overrides sit on either side of the flags: argparse takes
    positionals only before the first flag, so later ones are collected here."""
    args, extra = parser.parse_known_args(argv)
    if extra and hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """The ``catcap`` command: ``argv`` None reads the process's command line and applies the
    process's thread policy (catcap/threads.py); a list (tests, scripts calling catcap from
    Python) runs the command in the caller's process without changing its thread settings."""
    command_line = argv is None
    parser = build_parser()
    args = _parse(parser, argv)
    if args.command is None:
        parser.print_help()
        return 0
    from catcap.registry import UnknownName

    forget_bars()
    try:
        if command_line:  # threads that follow the free CPUs, from when torch loads ($CATCAP_THREADS; catcap/threads.py)
            configure_threads()
        checks.before_run(parser, args)  # finite numbers, outputs apart from inputs (cli/checks.py)
        keep_freed_memory()  # freed tensors' memory is reused, not faulted in again ($CATCAP_MALLOC; catcap/malloc.py)
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback (every writer leaves its files whole)
        print(f"catcap {args.command}: {interrupted(args)}", file=sys.stderr)
        return 130
    except (ValueError, UnknownName, *FILE_ERRORS) as err:  # catcap's input errors say what to fix
        print(f"catcap {args.command}: error: {_permission(err) if isinstance(err, PermissionError) else err}",
              file=sys.stderr)
        return 2
    except OSError as err:  # a full disk, a file too large, an I/O error: one line, exit 1 (docs/reliability.md)
        print(f"catcap {args.command}: error: {_os_error(err, args.command)}", file=sys.stderr)
        return 1


def _permission(err: PermissionError) -> str:
    """A file the user may not read or write, named as the user named it: a hidden temporary file
    of an atomic write (``.scores.json.x1y2.tmp``) is reported as the folder it was written into."""
    name = err.filename
    if not name:
        return str(err)
    path = Path(name)
    if path.name.startswith(".") and path.suffix == ".tmp":
        return (f"permission denied: cannot write into the folder {path.parent}; expected a folder you may write: "
                f"check its permissions (ls -ld {path.parent}) or choose another path")
    return (f"permission denied: {path}; expected a file or folder you may {'read' if path.exists() else 'create'}: "
            f"check its permissions (ls -ld {path if path.exists() else path.parent}) or choose another path")
# how an interrupted command goes on: rerun it (and it continues where it stopped, or starts again)
CONTINUES = {"extract", "import", "ablate"}


def interrupted(args: argparse.Namespace) -> str:
    """The line an interrupted command ends with: how far it got (its outermost progress bar)
    and how to go on."""
    from catcap.progress import interrupted_at

    at = interrupted_at()
    done = "interrupted" if at is None else f"interrupted: {at[0]} of {at[1]} {at[2]} done"
    if args.command == "train":
        where = f" ({at[3]})" if at and at[3] else ""
        resume = "" if getattr(args, "resume", False) else " with --resume"
        return (f"{done}{where}; rerun the same command{resume} to continue from the last checkpoint (out_dir/last, "
                "saved after every epoch and every train.save_every steps)")
    if args.command in CONTINUES or (args.command == "caption" and getattr(args, "out", None)):
        return f"{done}; rerun the same command to continue"
    if args.command == "caption":
        return f"{done}; rerun the same command to start again (with --out FILE.jsonl a rerun continues instead)"
    return f"{done}; rerun the same command to start again"


def _os_error(err: OSError, command: str) -> str:
    """One line for an error of the machine, not of the input: what failed, on which file, and
    that what was saved before is kept (every writer replaces files atomically)."""
    import errno

    where = f" ({err.filename})" if getattr(err, "filename", None) else ""
    what = err.strerror or str(err)
    hint = {errno.ENOSPC: "free some space", errno.EDQUOT: "free some space (disk quota exceeded)",
            errno.EFBIG: "the file is larger than this system or its limits allow (ulimit -f)",
            errno.EROFS: "the file system is read-only"}.get(err.errno, "check the disk and the path")
    again = "run it again with --resume to continue from the last checkpoint" if command == "train" else \
        "run the command again"
    return (f"{what}{where}; {hint}, then {again}: files written before the error are intact (a checkpoint, "
            "results or feature file is never left half-written under its name)")
