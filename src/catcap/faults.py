"""Named fault points: where the reliability tests kill catcap or make its disk fail.

Code that writes state calls ``faults.point("checkpoint.after_weights")`` at the moments a
crash would hurt most (a file written but not yet renamed, one file of a checkpoint written
and the next not, a log line half written). A point does nothing unless the environment
variable ``CATCAP_FAULT`` arms it when the process starts::

    CATCAP_FAULT=checkpoint.after_weights:kill        # SIGKILL this process at the 1st hit
    CATCAP_FAULT=runlog.after_append:kill:7           # ... at the 7th hit of that point
    CATCAP_FAULT=features.after_image:oserror:3       # raise OSError(ENOSPC) at the 3rd hit
    CATCAP_FAULT=caption.after_batch:sigint:2         # Ctrl-C at the 2nd hit

``kill`` sends SIGKILL to the process itself (no cleanup, no ``finally``, no atexit: what the
OOM killer or a cluster's scheduler does); ``oserror`` raises ``OSError(ENOSPC)`` as a full disk
would; ``sigint`` sends SIGINT to the process itself, as Ctrl-C in its terminal does. Several points may be armed at once, separated by commas. Unset, a point is one global
lookup and a return (no environment read, no string work), so the points stay in the code.
:data:`POINTS` lists every point with where it is; arming a name not in it is refused, so a
typo in a test cannot arm nothing. ``docs/reliability.md`` has what each point proves.

This module imports nothing of catcap (``catcap.atomic`` uses it).
"""

from __future__ import annotations

import errno
import os
import signal

VARIABLE = "CATCAP_FAULT"
ACTIONS = ("kill", "oserror", "sigint")

POINTS = {
    # training/checkpoint.py: the files of one checkpoint, written into a hidden temporary folder
    "checkpoint.after_weights": "model.safetensors written, nothing else yet",
    "checkpoint.after_vocab": "model weights and vocab.json written",
    "checkpoint.after_trainer": "trainer.safetensors and trainer.json written, config.json (with the hashes) not yet",
    "checkpoint.after_config": "every file written, not yet flushed to disk and renamed",
    "checkpoint.before_rename": "every file flushed, the folder not yet renamed into place",
    # folders.py: replacing an existing folder (checkpoint, world, study) takes two renames
    "folder.between_renames": "the old folder moved aside, the new one not yet in its place",
    # atomic.py: every single-file write (results, scores, vocab, prepare, reports, log rewind)
    "atomic.before_rename": "a file's data written and flushed under its temporary name",
    # training/runlog.py: log.jsonl, appended one record per line
    "runlog.mid_line": "half of a log record written and flushed",
    "runlog.after_append": "a whole log record appended",
    # training/loop.py
    "train.scst_switch": "XE -> SCST: best XE weights loaded, phase switched, not yet saved",
    # data/feature_base.py: every feature-store writer (HDF5, npz; extract, synth, import)
    "features.after_image": "one image written into <store>.partial",
    "features.before_commit": "<store>.partial closed, not yet renamed to <store>",
    # features/extract.py
    "extract.after_batch": "one batch of images encoded and written",
    # caption_file.py: catcap caption --out, one batch of JSON Lines appended to <out>.partial
    "caption.after_batch": "one batch of captions appended and flushed to <out>.partial",
    # web/human_eval/store.py: one rater's answer for one image, one SQLite transaction
    "human_eval.before_commit": "a vote's rows inserted, the transaction not committed",
    "human_eval.after_commit": "a vote committed",
}


class FaultSpecError(ValueError):
    """``CATCAP_FAULT`` names an unknown point or action."""


def parse(spec: str | None) -> dict[str, tuple[str, int]]:
    """``"name:action[:nth],..."`` -> {name: (action, nth)}; {} for None or ""."""
    armed: dict[str, tuple[str, int]] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        parts = item.strip().split(":")
        if len(parts) not in (2, 3) or parts[0] not in POINTS or parts[1] not in ACTIONS:
            raise FaultSpecError(f"{VARIABLE}={spec!r}: expected <point>:<kill|oserror|sigint>[:<nth>] with a point of "
                                 f"catcap.faults.POINTS, found {item!r}")
        try:
            nth = int(parts[2]) if len(parts) == 3 else 1
        except ValueError:
            nth = 0
        if nth < 1:
            raise FaultSpecError(f"{VARIABLE}={spec!r}: the hit count must be an integer >= 1, found {parts[2]!r}")
        armed[parts[0]] = (parts[1], nth)
    return armed


_armed = parse(os.environ.get(VARIABLE))
_hits: dict[str, int] = {}


def arm(spec: str | None) -> None:
    """Arm ``spec`` (same syntax as the variable) in this process and reset the hit counts;
    ``arm(None)`` disarms. For in-process tests; subprocesses read ``CATCAP_FAULT``."""
    global _armed
    _armed = parse(spec)
    _hits.clear()


def armed(name: str) -> bool:
    """Whether ``name`` is armed (a writer may split a write in two only then)."""
    return bool(_armed) and name in _armed


def point(name: str) -> None:
    """A fault point: nothing unless ``name`` is armed and this is its nth hit."""
    if not _armed or name not in _armed:
        return
    action, nth = _armed[name]
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != nth:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)  # not reached: SIGKILL to oneself is delivered before os.kill returns
    if action == "sigint":
        os.kill(os.getpid(), signal.SIGINT)  # Python raises KeyboardInterrupt in the main thread
        return
    raise OSError(errno.ENOSPC, f"No space left on device (injected by {VARIABLE} at {name})")
