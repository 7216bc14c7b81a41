"""Run the code cells of a text-exported notebook (the seed ``001_*.txt``) headless.

    python -m mml.notebook ../shared/seeds/001_*.txt

The text format: a code cell starts after a line ``In [...]:`` and runs until the first
paragraph (blank-line separated) that contains CJK text or until the next ``In [...]:``;
trailing paragraphs made only of ``#`` lines (a markdown heading such as ``# Transformer``)
are markdown, not code. IPython magics (``%matplotlib inline``, ``%autoreload 2``) are
dropped, matplotlib uses the Agg backend and ``plt.show()`` only closes the figures. All
other code runs unchanged, in order, in one namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

__all__ = ["CellResult", "code_cells", "main", "printed_errors", "run_cells"]

_CELL_START = re.compile(r"^In \[[^\]]*\]:\s*$")
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
_ERROR_LINE = re.compile(r"^\s*(\w+) error:\s+([-+0-9.eE]+|nan|inf)\s*$", re.MULTILINE)


@dataclass
class CellResult:
    """One executed cell: its index among the code cells, its source and what it printed."""

    index: int
    source: str
    output: str


def code_cells(text: str) -> list[str]:
    """The code cells of the notebook text, in order."""
    cells, lines = [], text.splitlines()
    starts = [i for i, line in enumerate(lines) if _CELL_START.match(line)]
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        code = _code_paragraphs(_paragraphs(lines[start + 1:end]))
        if code:
            cells.append("\n\n".join("\n".join(p) for p in code))
    return cells


def _paragraphs(lines: Sequence[str]) -> list[list[str]]:
    paragraphs, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.rstrip())
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    return paragraphs


def _code_paragraphs(paragraphs: list[list[str]]) -> list[list[str]]:
    code = []
    for paragraph in paragraphs:
        if any(_CJK.search(line) for line in paragraph):
            break
        code.append(paragraph)
    while code and all(line.lstrip().startswith("#") for line in code[-1]):
        code.pop()
    return code


def _without_magics(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("%"))


def run_cells(cells: Iterable[str], namespace: Optional[dict] = None, echo: bool = False) -> list[CellResult]:
    """Execute the cells in order in ``namespace``; returns what each printed.

    An exception in a cell propagates (with the cell index in its notes) after the cells
    before it have run.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    namespace = {"__name__": "__notebook__"} if namespace is None else namespace
    results = []
    with _show_closes_figures(plt):
        for index, source in enumerate(cells):
            buffer = io.StringIO()
            try:
                with contextlib.redirect_stdout(buffer):
                    exec(compile(_without_magics(source), f"<cell {index}>", "exec"), namespace)
            except Exception as err:
                err.add_note(f"in notebook code cell {index}; it printed:\n{buffer.getvalue()}")
                raise
            finally:
                plt.close("all")
            results.append(CellResult(index, source, buffer.getvalue()))
            if echo:
                print(f"--- cell {index} ---\n{buffer.getvalue()}", end="", flush=True)
    return results


@contextlib.contextmanager
def _show_closes_figures(plt):
    original = plt.show
    plt.show = lambda *args, **kwargs: plt.close("all")
    try:
        yield
    finally:
        plt.show = original


def printed_errors(output: str) -> dict[str, float]:
    """``{"scores": 5.1e-06, ...}`` from lines like ``scores error:  5.1e-06``."""
    return {name: float(value) for name, value in _ERROR_LINE.findall(output)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m mml.notebook NOTEBOOK.txt``: run its code cells, print what they print."""
    parser = argparse.ArgumentParser(prog="python -m mml.notebook", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path, help="the notebook as text (e.g. ../shared/seeds/001_*.txt)")
    args = parser.parse_args(argv)
    expected = "expected a notebook exported as text, with code cells after lines 'In [ ]:'"
    if not args.notebook.is_file():
        found = "is a folder" if args.notebook.is_dir() else "does not exist"
        parser.error(f"{args.notebook} {found}; {expected} (e.g. ../shared/seeds/001_*.txt)")
    try:
        text = args.notebook.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        parser.error(f"cannot read {args.notebook} as UTF-8 text ({err}); {expected}")
    cells = code_cells(text)
    if not cells:
        print(f"no code cells (lines 'In [ ]:') found in {args.notebook}", file=sys.stderr)
        return 2
    run_cells(cells, echo=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
