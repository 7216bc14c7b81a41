"""Progress bars that suit a terminal and a log file alike.

Every long job in catcap (training epochs, validation, feature extraction, world generation,
imports, analyses) draws its bar through :func:`progress_bar`:

- on a terminal: an ordinary tqdm bar, redrawn in place, with rate and ETA;
- when stderr is a file or a pipe (``catcap train ... 2> train.log``, CI, a job scheduler):
  one plain newline-terminated line with the same counts, rate and ETA every
  ``CATCAP_PROGRESS_SECONDS`` seconds (default 30) and one when the bar finishes, instead of a
  carriage-return redraw ten times a second (a 3-minute run used to write thousands of
  redraws into its log); a transient bar (``leave=False``, validation) appears there only once
  it has run for one interval;
- in a Jupyter notebook: tqdm's notebook widget (``tqdm.auto``).

``enabled=False`` (``--quiet``, ``train.progress: false``, non-zero ranks) draws nothing.
Wrapping an iterable creates exactly one iterator of it, as a plain loop does: every DataLoader
iterator draws a seed from the global torch RNG, so a bar that made a second one (tqdm.auto's
asyncio class does) would move every later dropout mask of a training run.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from tqdm import tqdm as _plain_tqdm
from tqdm.auto import tqdm as _auto_tqdm

DEFAULT_LOG_SECONDS = 30.0
# tqdm.auto picks its notebook widget class inside Jupyter (and an asyncio-capable plain bar elsewhere)
_IN_NOTEBOOK = any(cls.__module__ == "tqdm.notebook" for cls in _auto_tqdm.__mro__)


class _LineStream:
    """The stream tqdm writes to when stderr is not a terminal: each redraw (``"\\r" + text``)
    becomes one line; the blank redraws tqdm uses to clear a bar are dropped."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def log_interval() -> float:
    """Seconds between lines in a log file, from ``CATCAP_PROGRESS_SECONDS`` (default 30)."""
    raw = os.environ.get("CATCAP_PROGRESS_SECONDS", "")
    if not raw:
        return DEFAULT_LOG_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"CATCAP_PROGRESS_SECONDS must be a number of seconds, got {raw!r}; "
                         f"unset it for the default ({DEFAULT_LOG_SECONDS:g})") from None
    if seconds < 0:
        raise ValueError(f"CATCAP_PROGRESS_SECONDS must be >= 0, got {raw!r}")
    return seconds


def progress_bar(iterable=None, *, desc: str, unit: str, total: int | None = None, enabled: bool = True,
                 initial: int = 0, leave: bool = True, stream: TextIO | None = None):
    """A tqdm bar (same API: ``update``, ``set_postfix``, ``close``, iteration) for ``desc``.

    ``stream`` defaults to ``sys.stderr``; whether it is a terminal picks the style (module doc).
    """
    stream = sys.stderr if stream is None else stream
    common = dict(iterable=iterable, total=total, desc=desc, unit=unit, initial=initial, leave=leave,
                  disable=not enabled)
    if _IN_NOTEBOOK and stream is sys.stderr:
        return _auto_tqdm(**common)
    if _is_terminal(stream):
        return _plain_tqdm(**common, file=stream, dynamic_ncols=True)
    interval = log_interval()
    # a transient bar (leave=False, e.g. validation) shows up in a log only if it runs longer than one interval
    return _plain_tqdm(**common, file=_LineStream(stream), mininterval=interval, delay=0.0 if leave else interval,
                       miniters=1, ncols=100, ascii=True)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
