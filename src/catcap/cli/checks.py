"""Rules every ``catcap`` command line obeys, checked in one place after parsing and before the
command does any work (cli/main.py); each failure is a ValueError, i.e. one line and exit 2:

* every number given to a ``type=float`` option is finite (``--lr nan`` or ``--timeout inf``
  would train to NaN weights or wait forever);
* no output of the command meets one of its inputs (:mod:`catcap.cli.paths`): the options'
  declared roles, plus the paths a command's config names (``train``: ``out_dir`` against
  ``data.dataset``, ``data.features``, ``train.init_from``), given by a ``config_paths``
  default of the command's parser.

Also the exit status of a command that works through many inputs (docs/cli.md):
:func:`exit_status`.
"""

from __future__ import annotations

import argparse
import math
from catcap.cli import paths


def chain(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.ArgumentParser]:
    """The parser and the subcommand parsers ``args`` went through (catcap, vqa, vqa ask): the
    path to the parser whose ``func`` the arguments carry (a subcommand's name in ``args`` may be
    overwritten by an option of the same dest, e.g. ``import features --source``)."""
    func = getattr(args, "func", None)
    subs = [p for a in parser._actions if isinstance(a, argparse._SubParsersAction) for p in a.choices.values()]
    for sub in dict.fromkeys(subs):  # aliases list a parser twice
        found = chain(sub, args)
        if found:
            return [parser, *found]
    return [parser] if parser._defaults.get("func") is func else []


def actions_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.Action]:
    return [a for p in chain(parser, args) for a in p._actions]


def check_finite(actions: list[argparse.Action], args: argparse.Namespace) -> None:
    for action in actions:
        if getattr(action, "checked_by", None):  # a flag whose own validator names it, e.g. GenerationConfig's
            continue
        value = getattr(args, action.dest, None)
        if action.type is float and isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{paths.label(action)}: expected a finite number, found {value!r}; NaN and infinite "
                             "values are refused: give a real number")


def before_run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every rule of this module on a parsed command line (ValueError: exit 2, nothing done)."""
    actions = actions_of(parser, args)
    check_finite(actions, args)
    named = paths.named_paths(actions, args)
    config_paths = getattr(args, "config_paths", None)
    if config_paths is not None:
        named += config_paths(args)
    paths.check(named, args)


def exit_status(done: int, failed: int) -> int:
    """0: every input done; 1: some failed (what could be done is written, the failures listed);
    2: nothing could be done (docs/cli.md)."""
    if not failed:
        return 0
    return 1 if done else 2
