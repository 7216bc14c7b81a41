"""The training log ``out_dir/log.jsonl``: one JSON record per line, one run per file.

Records: ``{"kind": "train", "step": s, "epoch": e, ...}`` after optimizer step s and
``{"kind": "val", "step": s, "epoch": e, ...}`` after validating (0-based) epoch e; an SCST run
from ``train.init_from`` first logs ``{"kind": "val", "phase": "start", "step": 0, "epoch": -1, ...}``
for its start weights.

- A **new run** in a folder that already has a log moves the old log aside to
  ``log.<its last write time>.jsonl`` (nothing is deleted), so ``log.jsonl`` and the curves
  drawn from it (``catcap plot-log``) describe this run only.
- A **resumed run** continues the log from its checkpoint: the records the interrupted run
  wrote after that checkpoint (training it redoes) are dropped, so every step appears once
  and the log of a killed-and-resumed run equals that of an uninterrupted one.
- ``out_dir/machine.jsonl`` (:data:`MACHINE_NAME`) gets one line per start or resume of the
  run (:func:`note_machine`): the step it starts at and :func:`catcap.machine.describe`, so a
  run's numbers can be traced to the machine and software that computed them. A new run sets
  the old one aside like the log; a resume appends (a run resumed elsewhere shows both machines).
- Records are appended by :func:`append`; a kill can cut the last line short, so readers skip
  a last line that is not JSON (:func:`rewind` drops it, ``catcap plot-log`` ignores it).
  Fault points ``runlog.mid_line`` and ``runlog.after_append`` (``catcap.faults``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from catcap import faults
from catcap.atomic import write_text_atomic

LOG_NAME = "log.jsonl"
MACHINE_NAME = "machine.jsonl"


def set_aside(out_dir: Path, name: str = LOG_NAME) -> Path | None:
    """Move an existing ``out_dir/log.jsonl`` (or ``name``) to ``log.<YYYYmmdd-HHMMSS>.jsonl``
    (``machine.<...>.jsonl``); returns the new path (None when there was no such file)."""
    log = out_dir / name
    if not log.exists():
        return None
    stem = name.removesuffix(".jsonl")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(log.stat().st_mtime))
    target, n = out_dir / f"{stem}.{stamp}.jsonl", 1
    while target.exists():
        n += 1
        target = out_dir / f"{stem}.{stamp}-{n}.jsonl"
    log.rename(target)
    return target


def append(out_dir: Path, record: dict) -> None:
    """Append one record to ``out_dir/log.jsonl`` (one line, flushed when the file closes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record) + "\n"
    with open(out_dir / LOG_NAME, "a", encoding="utf-8") as f:
        if faults.armed("runlog.mid_line"):  # only in the tests: a line torn by a kill
            f.write(line[: len(line) // 2])
            f.flush()
            faults.point("runlog.mid_line")
            line = line[len(line) // 2:]
        f.write(line)
    faults.point("runlog.after_append")


def note_machine(out_dir: Path, record: dict) -> None:
    """Append one line to ``out_dir/machine.jsonl``: where this start or resume of the run begins
    (``record``: step, epoch, phase, resumed) and what computes it (:func:`catcap.machine.describe`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / MACHINE_NAME, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def rewind(out_dir: Path, step: int, epoch: int) -> int:
    """Keep the records written up to a checkpoint at ``step`` with ``epoch`` epochs finished:
    training records of steps <= ``step`` and validation records of epochs < ``epoch`` (plus
    any other record of a step <= ``step``). A line cut short by a kill is dropped too.
    Returns how many records were dropped."""
    log = out_dir / LOG_NAME
    if not log.exists():
        return 0
    kept, dropped = [], 0
    for line in log.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed run
            dropped += 1
            continue
        if _before(record, step, epoch):
            kept.append(line)
        else:
            dropped += 1
    if dropped:
        write_text_atomic(log, "".join(f"{line}\n" for line in kept))
    return dropped


def _before(record: dict, step: int, epoch: int) -> bool:
    if record.get("kind") == "val":
        return int(record.get("epoch", 0)) < epoch
    return int(record.get("step", 0)) <= step
