"""Helpers of the reliability suite: subprocess runners with a fault armed (``CATCAP_FAULT``) and
the "no reader ever sees a half-written file" check (a module of its own: ``from conftest import``
is ambiguous with several conftest.py files on sys.path)."""

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def env_with(fault: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("CATCAP_FAULT",)}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), str(TESTS / "features"),
                                                                             env.get("PYTHONPATH")])))
    if fault:
        env["CATCAP_FAULT"] = fault
    return env


def run(args: list[str], fault: str | None = None, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    """``python <args>`` with ``CATCAP_FAULT=fault``; stdout and stderr together in ``.stdout``."""
    return subprocess.run([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env_with(fault), timeout=timeout, **kw)


def catcap(args: list[str], fault: str | None = None, **kw) -> subprocess.CompletedProcess:
    return run(["-m", "catcap", *map(str, args)], fault, **kw)


def assert_no_half_written_file(folder: Path) -> list[Path]:
    """Every file under its final name (not hidden, not ``.partial``) parses; every checkpoint
    folder loads; returns the files checked. A log.jsonl may end in one line cut short (its
    readers skip it; docs/reliability.md), every other line must be JSON."""
    from safetensors.torch import load_file

    from catcap.data.features import open_feature_store
    from catcap.training.checkpoint import load_checkpoint

    checked = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part.startswith(".") or part.endswith(".partial") for part in rel.parts) or not path.is_file():
            continue
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif path.suffix == ".jsonl":
            lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            for line in lines[:-1]:
                json.loads(line)
        elif path.suffix == ".safetensors":
            load_file(str(path))
        elif path.suffix in (".h5", ".hdf5"):
            with open_feature_store(path) as store:
                for key in store.keys():
                    store.get(key)
        elif path.suffix == ".sqlite":
            import sqlite3

            with sqlite3.connect(path) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        checked.append(path)
    for config in folder.rglob("config.json"):
        if not any(part.startswith(".") for part in config.relative_to(folder).parts):
            load_checkpoint(config.parent, with_trainer=(config.parent / "trainer.json").exists())
    return checked
