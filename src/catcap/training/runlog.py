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


def set_aside(out_dir: Path) -> Path | None:
    """Move an existing ``out_dir/log.jsonl`` to ``log.<YYYYmmdd-HHMMSS>.jsonl``; returns the new
    path (None when there was no log)."""
    log = out_dir / LOG_NAME
    if not log.exists():
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(log.stat().st_mtime))
    target, n = out_dir / f"log.{stamp}.jsonl", 1
    while target.exists():
        n += 1
        target = out_dir / f"log.{stamp}-{n}.jsonl"
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
