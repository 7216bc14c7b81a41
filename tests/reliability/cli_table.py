"""The CLI as a table, read from the argparse definitions (``catcap.cli.main.build_parser``): every
command, its options, their declared path roles (catcap/cli/paths.py) and a command line that
parses. The generated tests (test_path_roles.py, test_numbers.py) and the bad-input catalogue
(benchmarks/bad_inputs.py) build their cases from it, so a new command or option is covered
without editing them."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from catcap.cli import paths
from catcap.cli.main import build_parser

# an option "names a path" when its metavar or its name says so (FILE.json, DIR, STORE, --images, ...)
PATH_METAVAR = re.compile(r"FILE|DIR|PATH|STORE|LIST|RUN|^OUT$|IMAGE|PHOTO|JSON|\.(json|jsonl|h5|yaml|png|html|txt)$",
                          re.IGNORECASE)
PATH_DEST = re.compile(r"(^|_)(file|dir|path|out|output|dataset|features|images?|checkpoint|model|refs|results|config|"
                       r"source|store|study|samples|boxes|zoo|corenlp|captions|tokens|scores)$")


@dataclass
class Command:
    words: tuple[str, ...]  # ("vqa", "ask")
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(self.words)

    @property
    def actions(self) -> list[argparse.Action]:
        return [a for a in self.parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]

    def with_role(self, kind: str) -> list[argparse.Action]:
        return [a for a in self.actions if paths.role_of(a) is not None and getattr(paths.role_of(a), kind)]


def commands(parser: argparse.ArgumentParser | None = None, words: tuple = ()) -> list[Command]:
    """Every leaf command (a parser without subcommands) of ``catcap``."""
    parser = parser or build_parser()
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [Command(words, parser)]
    return [c for sub in subs for name, p in sub.choices.items() for c in commands(p, (*words, name))]


def names_a_path(action: argparse.Action) -> bool:
    """Does this option hold a path, by its metavar or its name? (text options only)"""
    if action.type not in (None, str) or action.choices or action.nargs == 0:
        return False
    if not isinstance(action, (argparse._StoreAction, argparse._AppendAction)):
        return False
    return bool(PATH_METAVAR.search(str(action.metavar or "")) or PATH_DEST.search(action.dest))


def placeholder(action: argparse.Action, tmp: Path) -> str:
    """A value that parses for ``action`` (a path is a fresh name under ``tmp``)."""
    if action.choices:
        return str(next(iter(action.choices)))
    if action.type in (int, float):
        return "1"
    if paths.role_of(action) is not None or names_a_path(action):
        return str(tmp / f"placeholder-{action.dest}")
    return "x"


def argv(command: Command, tmp: Path, given: dict[argparse.Action, str]) -> list[str]:
    """A command line of ``command``: the ``given`` options with their values, every other
    required option or positional with a placeholder."""
    words, positionals = [*command.words], []
    for action in command.actions:
        if action in given:
            value = given[action]
        elif action.required or (not action.option_strings and action.nargs not in ("*", "?")):
            value = placeholder(action, tmp)
        else:
            continue
        if action.option_strings:
            flag = next((s for s in action.option_strings if s.startswith("--")), action.option_strings[0])
            words += [f"{flag}={value}"] if value.startswith("-") else [flag, value]  # -inf is not an option
        else:
            positionals.append(value)
    return [*words, *positionals]


def value_for(action: argparse.Action, path: str) -> str:
    """The option value that names ``path`` (``SPLIT=FILE`` options: ``val=path``; an option whose
    one value may name several paths, an ensemble ``A,B``: ``path`` second, after another)."""
    role = paths.role_of(action)
    if role is not None and role.path is not None:
        value = f"val={path}"
        assert role.path(value) == path, f"{action.dest}: its role's path() does not find {path} in {value}"
        return value
    if role is not None and role.many is not None and len(role.many(f"{path}-other,{path}")) == 2:
        return f"{path}-other,{path}"
    return path
