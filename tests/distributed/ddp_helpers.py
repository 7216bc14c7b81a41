"""Helpers of the torchrun tests: fast overrides, launching catcap train (under torchrun), killing a
whole torchrun tree. A module of its own (not conftest) so that imports are unambiguous."""

import os
import signal
import subprocess
import sys

from tiny_runs import tiny_run_overrides


def tiny_args(world, out_dir, **extra) -> list[str]:
    """key=value overrides for a fast CPU run (lr kept moderate so that runs do not go chaotic)."""
    return tiny_run_overrides(world, out_dir, **{"train.epochs": 1, "train.schedule.warmup": 200, **extra})


def catcap_train(args, nproc: int = 1, wait: bool = True, timeout: int = 300):
    """``python -m catcap train`` (nproc 1) or ``torchrun --standalone --nproc_per_node=N -m catcap
    train`` in a new session (so that a kill reaches every process); returns the Popen."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] \
        if nproc > 1 else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*launcher, "-m", "catcap", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    if wait:
        out = proc.communicate(timeout=timeout)[0]
        assert proc.returncode == 0, out
        proc.output = out
    return proc


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                pass
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_all(proc) -> None:
    """SIGKILL torchrun and every worker at once (the workers run in their own process groups,
    so the whole tree is collected first)."""
    for pid in [proc.pid, *_descendants(proc.pid)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
