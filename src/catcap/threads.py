"""How catcap's processes share a CPU with other processes: idle OpenMP threads sleep instead of
spinning, and a process runs no more intra-op threads than the CPUs it may use.

PyTorch's CPU kernels run in OpenMP parallel regions (here GNU libgomp, which torch's wheel
bundles; MKL and oneDNN use it too). Between two regions libgomp's idle threads spin for
``GOMP_SPINCOUNT`` = 300,000 rounds (~8 ms on this project's VM) before they sleep, so that the
next region finds them awake. On a machine of its own that is the fast choice. Beside another
CPU-bound process it collapses: the spinning threads hold cores the other process wants, the
OS takes a core from one of the region's threads, and every region's barrier then waits for a
thread that is not running. `catcap demo` took 53 minutes instead of 2.4 beside other jobs; the
issue's micro-benchmark (a 400x256 by 256x256 product, ReLU, backward, two threads, one busy
process beside it) did 44-52 steps/s, 140 with ``OMP_WAIT_POLICY=PASSIVE`` and 170 with
``GOMP_SPINCOUNT=0`` (issue 41).

:func:`configure_threads` applies catcap's policy (``"catcap"``):

- **wait**: ``OMP_WAIT_POLICY=PASSIVE`` and ``GOMP_SPINCOUNT=1000``: an idle libgomp thread spins
  1000 rounds (~27 us here, ``benchmarks/omp_gaps.py``) and then sleeps; LLVM's and Intel's
  OpenMP runtimes, which read only the first, sleep at once. Beside a busy process, longer spins
  were slower (``benchmarks/results/contention.md``); 1000 is also libgomp's own spin count
  for an active wait policy when its threads outnumber the CPUs. OpenMP reads the variables when its library is
  loaded, that is at ``import torch``: the call must come before it (the ``catcap`` commands
  make it first thing; their modules do not import torch at start). Left alone when the
  environment already sets ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT`` or ``KMP_BLOCKTIME``.
- **threads**: PyTorch already starts one intra-op thread per CPU of the process's affinity
  mask (``taskset``, ``os.sched_getaffinity``) but ignores a cgroup CPU quota (in a container
  limited to 2 CPUs of a large host, it starts a thread per core of the host). When the quota (cgroup v2 ``cpu.max``, v1
  ``cpu.cfs_quota_us``, rounded up) is smaller than the affinity mask, ``OMP_NUM_THREADS`` is
  set to it (or, when torch is already loaded, ``torch.set_num_threads``). Left alone when the
  environment sets ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS``.
- **worker processes** (DataLoader workers reading images for ``catcap extract`` and
  ``catcap caption``, and for training when ``train.num_workers`` > 0) run one thread each, so
  ``workers x threads <= CPUs`` holds when the worker count does: :func:`default_workers` caps
  the commands' default counts at the CPUs available (a larger ``--workers`` is the user's call).

``CATCAP_THREADS=torch`` (the environment variable) or ``configure_threads("torch")`` keeps
PyTorch's and OpenMP's defaults. Importing catcap as a library changes nothing: call
``catcap.configure_threads()`` before importing torch (docs/performance.md, "Threads on a
shared CPU").
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import MutableMapping, Optional

ENV_VAR = "CATCAP_THREADS"
CHOICES = ("catcap", "torch")
WAIT_SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "1000"}  # idle OpenMP threads sleep after ~27 us
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")  # any of them set: the user's wait policy stays
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # any of them set: the user's thread count stays
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class ThreadPolicy:
    """What :func:`configure_threads` did. ``cpus``: CPUs available to the process; ``env``: the
    variables it set; ``threads``: the intra-op thread count it asked for (None: left as is);
    ``wait_in_effect``: whether OpenMP in this process reads the wait setting (False when torch,
    and with it OpenMP, was loaded before the call: the setting then only reaches child
    processes)."""

    choice: str
    cpus: int
    env: dict = field(default_factory=dict)
    threads: Optional[int] = None
    wait_in_effect: bool = False


def configure_threads(choice: Optional[str] = None, *, warn: bool = True,
                      environ: Optional[MutableMapping[str, str]] = None) -> ThreadPolicy:
    """Apply ``choice`` (default: ``$CATCAP_THREADS``, else ``"catcap"``) to this process and the
    processes it starts (module doc): ``"catcap"`` sets the wait policy and caps intra-op
    threads at the CPUs available, ``"torch"`` changes nothing. Call it before ``import torch``;
    called after, it still caps the thread count, and warns (unless ``warn=False``) that the
    wait policy comes too late for this process. ``environ`` (default ``os.environ``) is where
    the variables are read and set."""
    environ = os.environ if environ is None else environ
    choice = choice or environ.get(ENV_VAR) or "catcap"
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}, got {choice!r} "
                         f"(unset it, or set {ENV_VAR}=torch to keep PyTorch's thread and wait defaults)")
    affinity = _affinity_count()
    cpus = available_cpus(affinity=affinity)
    if choice == "torch":
        return ThreadPolicy(choice, cpus)
    torch_loaded = _torch_loaded()
    env = policy_env(environ, cpus=cpus, affinity=affinity)
    environ.update(env)
    threads = int(env["OMP_NUM_THREADS"]) if "OMP_NUM_THREADS" in env else None
    if torch_loaded and threads is not None:
        import torch

        threads = min(threads, torch.get_num_threads())
        torch.set_num_threads(threads)
    wait_set = any(k in env for k in WAIT_SETTINGS)
    if torch_loaded and wait_set and warn:
        warnings.warn("catcap.configure_threads() was called after `import torch`: OpenMP read its wait policy "
                      "when torch was imported, so idle threads still spin in this process (the setting reaches "
                      "only the processes it starts); call it before the first `import torch`, or start Python "
                      "with OMP_WAIT_POLICY=PASSIVE in the environment", RuntimeWarning, stacklevel=2)
    return ThreadPolicy(choice, cpus, env, threads, wait_in_effect=wait_set and not torch_loaded)


def policy_env(environ: MutableMapping[str, str], *, cpus: int, affinity: int) -> dict[str, str]:
    """The variables catcap's policy adds to ``environ``: the wait setting unless one of
    ``WAIT_VARS`` is there, and ``OMP_NUM_THREADS=cpus`` when a cgroup quota leaves fewer
    ``cpus`` than the ``affinity`` mask holds, unless one of ``THREAD_VARS`` is there."""
    env = {}
    if not any(var in environ for var in WAIT_VARS):
        env.update(WAIT_SETTINGS)
    if cpus < affinity and not any(var in environ for var in THREAD_VARS):
        env["OMP_NUM_THREADS"] = str(cpus)
    return env


def available_cpus(*, affinity: Optional[int] = None, quota: Optional[float] = None,
                   proc_cgroup: Optional[str] = None, root: Path = CGROUP_ROOT) -> int:
    """CPUs this process may use: its affinity mask's size (default: read), capped by its cgroup
    CPU quota rounded up (default: read from ``proc_cgroup``, the text of /proc/self/cgroup,
    under ``root``); at least 1."""
    count = _affinity_count() if affinity is None else affinity
    limit = cgroup_cpu_limit(proc_cgroup, root) if quota is None else quota
    if limit is not None:
        count = min(count, math.ceil(limit))
    return max(1, count)


def default_workers(wanted: int) -> int:
    """A command's default count of worker processes (one thread each): ``wanted``, at most the
    CPUs available, so that worker threads do not outnumber them."""
    return max(0, min(wanted, available_cpus()))


def cgroup_cpu_limit(proc_cgroup: Optional[str] = None, root: Path = CGROUP_ROOT) -> Optional[float]:
    """CPUs the process's cgroup quota allows (e.g. 1.5), the smallest over its cgroup and the
    ones above it; None without a quota (or without cgroups). ``proc_cgroup``: the text of
    /proc/self/cgroup (default: read); ``root``: where the cgroup file systems are mounted."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return None
    limits = []
    for line in proc_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":  # cgroup v2: <root>/<path>/cpu.max = "QUOTA PERIOD" or "max PERIOD"
            limits += [q for folder in _folders(root, path) if (q := _v2_quota(folder)) is not None]
        elif "cpu" in controllers.split(","):  # cgroup v1: cpu.cfs_quota_us (-1: none) / cpu.cfs_period_us
            mount = next((m for m in (root / controllers, root / "cpu", root / "cpu,cpuacct") if m.is_dir()), None)
            if mount is not None:
                limits += [q for folder in _folders(mount, path) if (q := _v1_quota(folder)) is not None]
    return min(limits) if limits else None


def _folders(mount: Path, path: str) -> list[Path]:
    """The process's cgroup folder under ``mount`` and each folder above it up to ``mount``. Inside
    a container the listed path may not exist under the mount (the mount is the container's own
    cgroup): then only ``mount`` itself."""
    folder = mount / path.strip("/")
    if not folder.is_dir():
        return [mount]
    out = [folder]
    while folder != mount:
        folder = folder.parent
        out.append(folder)
    return out


def _v2_quota(folder: Path) -> Optional[float]:
    fields = _read(folder / "cpu.max").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(folder: Path) -> Optional[float]:
    return _ratio(_read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us"))


def _ratio(quota: str, period: str) -> Optional[float]:
    """quota / period in CPUs; None for no quota (-1, unreadable, malformed)."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _torch_loaded() -> bool:
    """Whether torch, and with it OpenMP, is loaded in this process already."""
    return "torch" in sys.modules


def _affinity_count() -> int:
    """CPUs in this process's affinity mask (``os.cpu_count()`` where there is no such call)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
