"""The example commands a ``--help`` text shows, and a check that each one is a command the
parser accepts (importable as ``help_examples``: tests/ is on sys.path). A help text is for
teaching commands that work: an example with a renamed or missing option fails here."""

from __future__ import annotations

import argparse
import shlex

from catcap.cli.main import _parse, build_parser


def example_commands(help_text: str) -> list[list[str]]:
    """argv lists (without the leading ``catcap``) of the example block of a help text: the
    lines after a line starting with ``example`` (``example:``, ``examples:``, ``example (...):``)
    up to the next blank line, backslash continuations joined."""
    lines, inside = [], False
    for line in help_text.splitlines():
        if line.strip().lower().startswith("example"):
            inside = True
            continue
        if inside and not line.strip():
            inside = False
        if inside:
            lines.append(line.strip())
    joined = " ".join(lines).replace("\\ ", " ")
    commands = [shlex.split(part) for part in joined.split(" catcap ")]
    commands = [c[1:] if c and c[0] == "catcap" else c for c in commands]
    return [c for c in commands if c]


def parse_example(argv: list[str]) -> argparse.Namespace:
    """The example parsed as ``catcap`` parses it (SystemExit for an unknown option or value)."""
    args = _parse(build_parser(), argv)
    assert hasattr(args, "func"), f"{argv}: parsed to no command"
    return args
