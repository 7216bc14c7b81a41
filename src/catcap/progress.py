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
Every bar counts its updates even then, and one stopped by Ctrl-C keeps its count, so that the
``catcap`` command can end on one line saying how far it got (:func:`interrupted_at`).
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


class _Counted:
    """What :func:`progress_bar` adds to a tqdm bar: ``done`` counts the updates (tqdm skips
    them on a disabled bar), and a bar that is not closed normally (never closed, or closed
    while a KeyboardInterrupt unwinds) stays in ``_UNFINISHED`` for :func:`interrupted_at`."""

    def __init__(self, *args, **kwargs):
        # kept on the bar: tqdm closes a forgotten bar from __del__, possibly while the interpreter
        # shuts down and module globals are already None
        self._unfinished, self._exc_info = _UNFINISHED, sys.exc_info
        self.done = kwargs.get("initial") or 0
        # (total, unit, description): a disabled tqdm bar does not keep them
        self.what = (kwargs.get("total"), kwargs.get("unit") or "it", kwargs.get("desc") or "")
        super().__init__(*args, **kwargs)
        _UNFINISHED.append(self)

    def update(self, n=1):
        self.done += n
        return super().update(n)

    def close(self):
        if not isinstance(self._exc_info()[1], KeyboardInterrupt):
            self._unfinished[:] = [bar for bar in self._unfinished if bar is not self]
        super().close()


class _PlainBar(_Counted, _plain_tqdm):
    pass


class _AutoBar(_Counted, _auto_tqdm):
    pass


_UNFINISHED: list = []  # bars in creation order that did not finish normally
UNITS = {"img": "images", "batch": "batches"}


def forget_bars() -> None:
    """Start a new command: no bar of an earlier one is reported by :func:`interrupted_at`."""
    _UNFINISHED.clear()


def interrupted_at() -> tuple[int, int, str, str] | None:
    """(done, total, unit in words, description) of the outermost bar that did not finish (the
    first made among them, with a total): how far an interrupted command got; None without one."""
    bar = next((b for b in _UNFINISHED if b.what[0]), None)
    if bar is None:
        return None
    total, unit, desc = bar.what
    done = max(bar.done, getattr(bar, "n", 0))  # a bar wrapping an iterable advances n itself
    return done, int(total), UNITS.get(unit, unit), desc


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
        return _AutoBar(**common)
    if _is_terminal(stream):
        return _PlainBar(**common, file=stream, dynamic_ncols=True)
    interval = log_interval()
    # a transient bar (leave=False, e.g. validation) shows up in a log only if it runs longer than one interval
    return _PlainBar(**common, file=_LineStream(stream), mininterval=interval, delay=0.0 if leave else interval,
                     miniters=1, ncols=100, ascii=True)


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
