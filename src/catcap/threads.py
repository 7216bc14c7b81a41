"""How catcap's processes share a CPU with other processes: a process runs as many intra-op
threads as there are CPUs that other processes leave free, re-measured as it runs.

PyTorch's CPU kernels run in OpenMP parallel regions (here GNU libgomp, which torch's wheel
bundles; MKL and oneDNN use it too), one thread per CPU of the process. On a machine of its own
that is the fast choice. Beside another CPU-bound process it collapses: the OS takes a core from
one of the region's threads, and every region's barrier then waits for a thread that is not
running (while libgomp's idle threads spin ~8 ms between regions and hold cores the other
process wants). `catcap demo` took 53 minutes instead of 2.4 beside other jobs; the issue's
micro-benchmark (a 400x256 by 256x256 product, ReLU, backward, two threads, one busy process
beside it) did 44-52 steps/s against 190 at one thread (issue 41). Making idle threads sleep
(``OMP_WAIT_POLICY=PASSIVE``, a short ``GOMP_SPINCOUNT``) helps beside a busy process but costs a
wake-up per region on a quiet machine: up to 1.47x a demo training step
(``benchmarks/results/contention.md``). So catcap keeps OpenMP's wait defaults and changes the
thread count instead.

:func:`configure_threads` applies catcap's policy (``"catcap"``):

- **threads follow the free CPUs** (:class:`CpuShare`, :func:`pace`): every ``PACE_SECONDS`` the
  process reads how busy its CPUs were (``/proc/stat``, the lines of the CPUs in its affinity
  mask) minus its own CPU time: what *other* processes used. It then runs ``cpus - ceil(others -
  0.25)`` intra-op threads, at least 1: two on a quiet 2-CPU machine, one beside one busy process
  (one thread never waits at a barrier for a descheduled partner), two again when it stops.
  Below the full count it probes: every 2-16 s it runs all threads for one sample and keeps
  them if the neighbours' use drops (they yield: a lower priority that ``/proc/stat`` does not
  show), so a low-priority job that filled an idle core does not hold it.
  Processes at a lower priority (``nice`` > 0) leave their CPUs free where the kernel ranks
  processes by nice machine-wide (:func:`niced_time_is_free`: not where automatic session groups
  make ``nice`` rank only within one terminal's session).
  OpenMP's thread count is a setting of each thread that starts parallel regions, so the
  count is applied by the thread that computes: a global forward pre-hook of ``torch.nn``
  (registered when torch loads) calls :func:`pace` before every module runs, in whatever thread
  runs it (the training loop, decoding, the caption pipeline's encoder thread, extraction). A
  call that is not due costs a clock read. Off where ``/proc/stat`` cannot be read (not Linux),
  under a cgroup CPU quota below the affinity mask (the quota, not the neighbours, is the limit
  there: see the next point), and with 1 CPU.
- **a cgroup quota caps the threads**: PyTorch starts one intra-op thread per CPU of the
  process's affinity mask (``taskset``, ``os.sched_getaffinity``) but ignores a cgroup CPU quota
  (in a container limited to 2 CPUs of a large host, it starts a thread per core of the host).
  When the quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``, rounded up) is smaller than
  the affinity mask, ``OMP_NUM_THREADS`` is set to it (or, when torch is already loaded,
  ``torch.set_num_threads``).
- **worker processes** (DataLoader workers reading images for ``catcap extract`` and
  ``catcap caption``, and for training when ``train.num_workers`` > 0) run one thread each, so
  ``workers x threads <= CPUs`` holds when the worker count does: :func:`default_workers` caps
  the commands' default counts at the CPUs available (a larger ``--workers`` is the user's call).
  Their CPU time counts as another process's: the main process leaves them their cores.

Left alone when the environment sets ``OMP_NUM_THREADS`` or ``MKL_NUM_THREADS`` (the user's
thread count stays, and nothing re-measures it). ``CATCAP_THREADS=torch`` (the environment
variable) or ``configure_threads("torch")`` keeps PyTorch's defaults. Importing catcap as a
library changes nothing: call ``catcap.configure_threads()`` (docs/performance.md, "Threads on
a shared CPU").
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import math
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, MutableMapping, Optional

ENV_VAR = "CATCAP_THREADS"
CHOICES = ("catcap", "torch")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # any of them set: the user's thread count stays
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_STAT = Path("/proc/stat")
AUTOGROUP = Path("/proc/sys/kernel/sched_autogroup_enabled")
PACE_SECONDS = 0.25  # how often the free CPUs are re-measured
STALE_SECONDS = 1.0  # a longer gap between samples (the process was not computing) only starts a new count
SLACK = 0.25  # CPU another process may use (a daemon, a shell) before a thread gives way
PROBE_SECONDS = (2.0, 16.0)  # below the full count, try it again after 2 s, doubling to 16 s while it fails


@dataclass(frozen=True)
class ThreadPolicy:
    """What :func:`configure_threads` did. ``cpus``: CPUs available to the process; ``env``: the
    variables it set; ``threads``: the intra-op thread count it asked for (None: left as is);
    ``paced``: whether the thread count now follows the free CPUs (:func:`pace`)."""

    choice: str
    cpus: int
    env: dict = field(default_factory=dict)
    threads: Optional[int] = None
    paced: bool = False


def configure_threads(choice: Optional[str] = None, *, environ: Optional[MutableMapping[str, str]] = None,
                      stat: Path = PROC_STAT) -> ThreadPolicy:
    """Apply ``choice`` (default: ``$CATCAP_THREADS``, else ``"catcap"``) to this process and the
    processes it starts (module doc): ``"catcap"`` caps the intra-op threads at a cgroup quota
    and makes them follow the CPUs other processes leave free, ``"torch"`` changes nothing.
    Works before and after ``import torch``. ``environ`` (default ``os.environ``) is where the
    variables are read and set; ``stat``: the kernel's CPU counters (for tests)."""
    environ = os.environ if environ is None else environ
    choice = choice or environ.get(ENV_VAR) or "catcap"
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}, got {choice!r} "
                         f"(unset it, or set {ENV_VAR}=torch to keep PyTorch's thread defaults)")
    affinity = _affinity_count()
    cpus = available_cpus(affinity=affinity)
    if choice == "torch":
        return ThreadPolicy(choice, cpus)
    user_count = any(var in environ for var in THREAD_VARS)
    env = policy_env(environ, cpus=cpus, affinity=affinity)
    environ.update(env)
    threads = int(env["OMP_NUM_THREADS"]) if "OMP_NUM_THREADS" in env else None
    if _torch_loaded() and threads is not None:
        import torch

        threads = min(threads, torch.get_num_threads())
        torch.set_num_threads(threads)
    paced = not user_count and cpus == affinity and cpus > 1 and start_pacing(CpuShare(cpus, stat=stat))
    return ThreadPolicy(choice, cpus, env, threads, paced)


def policy_env(environ: MutableMapping[str, str], *, cpus: int, affinity: int) -> dict[str, str]:
    """The variables catcap's policy adds to ``environ``: ``OMP_NUM_THREADS=cpus`` when a cgroup
    quota leaves fewer ``cpus`` than the ``affinity`` mask holds, unless one of ``THREAD_VARS``
    is there."""
    if cpus < affinity and not any(var in environ for var in THREAD_VARS):
        return {"OMP_NUM_THREADS": str(cpus)}
    return {}


# -- threads that follow the free CPUs ---------------------------------------------------------

class CpuShare:
    """How many intra-op threads the CPUs that other processes leave free allow.

    :meth:`sample` reads the busy time of the CPUs in the process's affinity mask (``stat``:
    ``/proc/stat``; user + nice + system + irq + softirq + steal) and the process's own CPU
    time (``own_cpu``, all its threads); over the time since the previous sample,

        others  = (busy - own) / wall                  CPUs other processes used
        threads = max(1, cpus - ceil(others - SLACK))

    The first sample only starts the count (``threads`` stays ``cpus``), and so does a sample
    more than ``STALE_SECONDS`` after the previous one: what other processes did while this one
    was not computing (e.g. waiting for its next request) says little about now, so the count
    stays as it was until the next sample.

    ``niced_free`` (default :func:`niced_time_is_free`): the CPU time of processes at a lower
    priority (``nice`` > 0, the ``nice`` column) is left out of ``busy``: the scheduler gives
    their cores to this process when it wants them, so they are free for its threads.

    **Probes.** A neighbour of lower priority that ``/proc/stat`` does not mark as such (a job
    whose session group is niced, a cgroup of small weight) fills the cores this process leaves
    idle, and then looks busy: measured alone, the count would stay low while that neighbour
    would yield at once. So below the full count the share tries it again: after
    ``PROBE_SECONDS[0]`` it runs ``cpus`` threads for one sample, and keeps them if the others'
    use then leaves room (a yielding neighbour's drops to nearly nothing); else it goes back and
    waits twice as long before the next try, up to ``PROBE_SECONDS[1]`` (beside an equal
    neighbour one try of 0.25 s in 16 s). ``probes`` counts the tries."""

    def __init__(self, cpus: int, *, stat: Path = PROC_STAT, own_cpu: Callable[[], float] = time.process_time,
                 clock: Callable[[], float] = time.monotonic, mask: Optional[set[int]] = None,
                 niced_free: Optional[bool] = None):
        self.cpus, self.stat, self.own_cpu, self.clock = cpus, Path(stat), own_cpu, clock
        self.mask = _affinity_mask() if mask is None else mask
        self.niced_free = niced_time_is_free() if niced_free is None else niced_free
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.threads, self.others = cpus, 0.0
        self.last: Optional[tuple[float, float, float]] = None
        self.probing, self.probes, self.wait = False, 0, PROBE_SECONDS[0]
        self.next_probe = 0.0

    def readable(self) -> bool:
        return self._busy() is not None

    def sample(self) -> int:
        """Measure (see the class doc) -> the thread count now."""
        busy, now, own = self._busy(), self.clock(), self.own_cpu()
        if busy is None:
            return self.threads
        if self.last is not None and 0 < now - self.last[1] <= STALE_SECONDS:
            wall, before = now - self.last[1], self.threads
            self.others = max(0.0, (busy - self.last[0]) - (own - self.last[2])) / wall
            self.threads = max(1, min(self.cpus, self.cpus - math.ceil(self.others - SLACK)))
            self._probe(now, before)
        self.last = (busy, now, own)
        return self.threads

    def _probe(self, now: float, before: int) -> None:
        """After :meth:`sample` measured (``before``: the count until then): judge a probe that
        just ended, or start one when the count has been below the full one long enough (class doc)."""
        if self.threads == self.cpus:  # room for all (a probe that succeeded, or the neighbours left)
            self.probing, self.wait = False, PROBE_SECONDS[0]
        elif self.probing:  # the neighbours kept their CPUs while we asked for them: wait longer
            self.probing, self.wait = False, min(2 * self.wait, PROBE_SECONDS[1])
            self.next_probe = now + self.wait
        elif before == self.cpus:  # the count just went down
            self.next_probe = now + self.wait
        elif now >= self.next_probe:
            self.probing, self.threads, self.probes = True, self.cpus, self.probes + 1

    def _busy(self) -> Optional[float]:
        """Busy seconds of the CPUs in the mask since boot; None when ``stat`` cannot be read."""
        try:
            lines = self.stat.read_text().splitlines()
        except OSError:
            return None
        ticks = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in self.mask:
                continue
            f = [int(x) for x in rest.split()]
            nice = 0 if self.niced_free else f[1]
            ticks += f[0] + nice + f[2] + sum(f[5:8])  # user nice system (idle iowait) irq softirq steal
        return ticks / self.tick


def niced_time_is_free(*, own_nice: Optional[int] = None, autogroup: Path = AUTOGROUP) -> bool:
    """Whether the CPU time of processes at nice > 0 is free for this process's threads: when
    this process is not niced itself (else its own time is in that column, beside processes of
    its rank) and the kernel ranks processes by nice across the machine, i.e. its automatic
    session groups are off (``/proc/sys/kernel/sched_autogroup_enabled`` 0 or absent). With them
    on (the default of many desktop kernels) nice only ranks processes within one session (one
    terminal), a ``nice -n 19`` job started from another terminal competes as an equal, and its
    time counts as taken: a paced process then runs one thread fewer, which costs at most the
    fair share, where running threads the neighbour holds costs far more (module doc)."""
    own = os.getpriority(os.PRIO_PROCESS, 0) if own_nice is None else own_nice
    if own > 0:
        return False
    try:
        return autogroup.read_text().strip() == "0"
    except OSError:
        return True  # a kernel without session groups: nice ranks every process


class _Pacer:
    """The process's :class:`CpuShare`, sampled at most every ``PACE_SECONDS``; each thread that
    calls :meth:`pace` applies the latest count to itself (OpenMP's count is per thread)."""

    def __init__(self, share: CpuShare):
        self.share, self.due, self.version = share, 0.0, 0
        self.lock, self.local = threading.Lock(), threading.local()

    def pace(self) -> None:
        now = self.share.clock()
        if now >= self.due and self.lock.acquire(blocking=False):
            try:
                before = self.share.threads
                if self.share.sample() != before:
                    self.version += 1  # = the changes so far
                self.due = now + PACE_SECONDS
            finally:
                self.lock.release()
        if getattr(self.local, "version", -1) != self.version:
            import torch

            self.local.version = self.version
            torch.set_num_threads(self.share.threads)


_PACER: Optional[_Pacer] = None


def pace() -> None:
    """Let the calling thread run as many intra-op threads as the free CPUs allow (module doc).
    Does nothing unless :func:`configure_threads` started pacing; cheap when not due."""
    if _PACER is not None:
        _PACER.pace()


def paced_threads() -> Optional[tuple[int, float, int]]:
    """(thread count, CPUs other processes used at the last sample, changes so far), or None
    when the thread count is not paced."""
    return None if _PACER is None else (_PACER.share.threads, _PACER.share.others, _PACER.version)


def start_pacing(share: CpuShare) -> bool:
    """Make the thread count follow ``share`` (once per process): :func:`pace` before every
    ``torch.nn`` module call, in the thread that runs it, from when torch loads. False when the
    CPU counters cannot be read."""
    global _PACER
    if _PACER is not None:
        return True
    if not share.readable():
        return False
    _PACER = _Pacer(share)
    share.sample()
    if hasattr(os, "register_at_fork"):  # a forked worker (one thread, e.g. a DataLoader's) is not paced
        os.register_at_fork(after_in_child=_stop_pacing)
    if _torch_loaded():
        _register_hook(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterImport("torch", _register_hook))
    return True


def _stop_pacing() -> None:
    global _PACER
    _PACER = None


def _register_hook(torch) -> None:
    is_compiling = torch.compiler.is_compiling

    def hook(module, args) -> None:
        if not is_compiling():  # inside torch.compile's tracing the hook is a no-op (no graph break)
            pace()

    torch.nn.modules.module.register_module_forward_pre_hook(hook)
    # torch.compile(module) warns that global hooks fire once more for its wrapper: pacing twice is harmless
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks",
                            category=UserWarning)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once module ``name`` has loaded (a post-import hook): the finder
    steps aside, finds the module's spec as Python would, and wraps its loader's exec_module."""

    def __init__(self, name: str, then: Callable):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module, then = spec.loader.exec_module, self.then

        def exec_then(module):
            exec_module(module)
            then(module)

        spec.loader.exec_module = exec_then
        return spec


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


def photo_readers() -> int:
    """JPEG reading processes of captioning from photos (``catcap caption``, evaluation from
    photos) by default: 1 when the process may use at most 2 CPUs, else 2."""
    return 1 if available_cpus() <= 2 else 2


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


def _affinity_mask() -> set[int]:
    """The CPUs of this process's affinity mask (all of them where there is no such call)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def _affinity_count() -> int:
    """CPUs in this process's affinity mask (``os.cpu_count()`` where there is no such call)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
