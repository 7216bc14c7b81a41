"""catcap.threads: the thread count that follows the free CPUs (the measurement on fake kernel
counters, and in a fresh Python that the count reaches every thread that computes, from when
torch loads), what the policy sets and what it leaves, the CPU count from the affinity mask and
cgroup quotas (fake cgroup trees), and the worker budget. No speed is asserted here
(benchmarks/contention.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from catcap import threads
from catcap.cli.main import main
from catcap.threads import (CpuShare, available_cpus, cgroup_cpu_limit, configure_threads, default_workers,
                            niced_time_is_free, policy_env)

SRC = str(Path(threads.__file__).resolve().parents[1])
TINY = Path(threads.__file__).resolve().parents[2] / "configs" / "models" / "tiny.yaml"


def _stat(path: Path, busy_seconds: dict[int, float], tick: int = 100, niced: Optional[dict[int, float]] = None) -> None:
    """A /proc/stat whose cpuN lines say CPU N was busy ``busy_seconds[N]`` (as user time) and
    ``niced[N]`` at nice > 0 (the nice column)."""
    niced = niced or {}
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{n} {round(s * tick)} {round(niced.get(n, 0) * tick)} 0 1000 0 0 0 0 0 0"
              for n, s in sorted(busy_seconds.items())]
    path.write_text("\n".join(lines + ["intr 0", "ctxt 0"]) + "\n")


class Clocks:
    """The wall clock and the process's CPU time, moved by hand."""

    def __init__(self):
        self.wall, self.own = 100.0, 5.0


# --- the thread count follows the free CPUs -----------------------------------------------------

def test_the_count_is_the_cpus_other_processes_leave_free(tmp_path):
    stat, clocks = tmp_path / "stat", Clocks()
    share = CpuShare(2, stat=stat, own_cpu=lambda: clocks.own, clock=lambda: clocks.wall, mask={0, 1}, niced_free=False)
    share.tick = 100
    _stat(stat, {0: 10.0, 1: 10.0})
    assert share.sample() == 2  # the first sample only starts the count

    def step(seconds: float, own: float, busy: dict[int, float]) -> int:
        clocks.wall += seconds
        clocks.own += own
        _stat(stat, busy)
        return share.sample()

    assert step(1.0, 2.0, {0: 11.0, 1: 11.0}) == 2 and share.others == 0.0  # all the busy time was ours
    assert step(1.0, 1.0, {0: 12.0, 1: 12.0}) == 1 and share.others == 1.0  # another process used a core
    assert step(1.0, 2.0, {0: 13.0, 1: 13.2}) == 2 and share.others == pytest.approx(0.2)  # a little: within SLACK
    assert step(1.0, 0.0, {0: 14.0, 1: 14.0}) == 1 and share.others == pytest.approx(1.8)  # nearly two: one thread, never 0
    assert step(1.0, 1.0, {0: 15.0, 1: 14.0}) == 2  # they stopped
    assert step(30.0, 1.0, {0: 45.0, 1: 44.0}) == 2  # after a pause (others busy meanwhile): only a new count
    assert step(1.0, 1.0, {0: 46.0, 1: 45.0}) == 1 and share.others == 1.0  # then measured again


@pytest.mark.parametrize("niced_free, threads", [(True, 2), (False, 1)])
def test_a_niced_neighbour_leaves_its_core_free_where_nice_ranks_machine_wide(tmp_path, niced_free, threads):
    stat, clocks = tmp_path / "stat", Clocks()
    share = CpuShare(2, stat=stat, own_cpu=lambda: clocks.own, clock=lambda: clocks.wall, mask={0, 1},
                     niced_free=niced_free)
    share.tick = 100
    _stat(stat, {0: 10.0, 1: 10.0}, niced={0: 3.0})
    share.sample()
    clocks.wall, clocks.own = clocks.wall + 1.0, clocks.own + 1.0
    _stat(stat, {0: 10.0, 1: 11.0}, niced={0: 4.0})  # a nice-19 job had CPU 0, we had CPU 1
    assert share.sample() == threads


def _neighbour(tmp_path, yields: bool):
    """A share beside a neighbour that fills every core the process leaves idle; ``yields``: it
    gives a core back when the process runs a thread there (a lower priority that /proc/stat
    does not show), else it keeps one core. -> (share, step): 0.25 s of the process at
    ``python`` (one core: single-threaded work) or at its thread count."""
    stat, clocks, busy = tmp_path / "stat", Clocks(), {0: 10.0, 1: 10.0}
    share = CpuShare(2, stat=stat, own_cpu=lambda: clocks.own, clock=lambda: clocks.wall, mask={0, 1}, niced_free=False)
    share.tick = 100
    _stat(stat, busy)
    share.sample()

    def step(python: bool = False) -> int:
        ours = 1 if python else (share.threads if yields else 1)
        clocks.wall += 0.25
        clocks.own += 0.25 * ours
        busy[0] += 0.25  # both cores busy: ours, and the neighbour's on the rest
        busy[1] += 0.25
        _stat(stat, busy)
        return share.sample()
    return share, step


def test_a_neighbour_that_yields_gets_its_core_back_by_a_probe(tmp_path):
    share, step = _neighbour(tmp_path, yields=True)
    assert [step(python=True) for _ in range(4)] == [1] * 4  # the neighbour took the idle core: it looks busy
    counts = [step() for _ in range(12)]  # computing again, at one thread: the neighbour keeps looking busy...
    assert counts[-1] == 2 and share.probes == 1, counts  # ...until a probe runs two threads, and it gives way
    assert counts.index(2) <= 8, counts  # the probe came PROBE_SECONDS[0] after the count went down


def test_an_equal_neighbour_is_probed_ever_more_rarely(tmp_path):
    share, step = _neighbour(tmp_path, yields=False)
    counts = [step() for _ in range(4 * 60)]  # a minute beside a neighbour that keeps its core
    assert counts.count(2) == share.probes and 3 <= share.probes <= 6, (share.probes, counts)  # 2 s, 4, 8, 16, 16..
    assert counts[-8:] == [1] * 8


@pytest.mark.parametrize("own_nice, autogroup, free", [
    (0, "0\n", True),    # nice ranks every process: a niced neighbour yields to us
    (0, "1\n", False),   # session groups: a niced job in another terminal competes as an equal
    (0, None, True),     # a kernel without session groups
    (5, "0\n", False),   # we are niced ourselves: our own time is in that column
])
def test_when_niced_time_is_free(tmp_path, own_nice, autogroup, free):
    path = tmp_path / "sched_autogroup_enabled"
    if autogroup is not None:
        path.write_text(autogroup)
    assert niced_time_is_free(own_nice=own_nice, autogroup=path) is free


def test_only_the_cpus_of_the_affinity_mask_count(tmp_path):
    stat, clocks = tmp_path / "stat", Clocks()
    share = CpuShare(2, stat=stat, own_cpu=lambda: clocks.own, clock=lambda: clocks.wall, mask={2, 3})
    share.tick = 100
    _stat(stat, {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0})
    share.sample()
    clocks.wall += 1.0
    _stat(stat, {0: 1.0, 1: 1.0, 2: 0.0, 3: 0.0})  # busy CPUs this process may not use
    assert share.sample() == 2 and share.others == 0.0


def test_unreadable_counters_leave_the_count_alone(tmp_path):
    share = CpuShare(2, stat=tmp_path / "missing")
    assert not share.readable() and share.sample() == 2


PACED = """
import json, sys, threading, time
from pathlib import Path
import catcap
from catcap import threads
stat, mask = Path(sys.argv[1]), sorted(threads._affinity_mask())
def write(busy):
    lines = [f"cpu{n} {round(busy * 100)} 0 0 0 0 0 0 0 0 0" for n in mask]
    stat.write_text("cpu  0 0 0 0 0 0 0 0 0 0\\n" + "\\n".join(lines) + "\\n")
write(0.0)
policy = catcap.configure_threads(stat=stat)
threads._PACER.share.tick = 100
loaded_before = "torch" in sys.modules
import torch
layer = torch.nn.Linear(4, 4)
seen = {"paced": policy.paced, "torch_before": loaded_before, "cpus": policy.cpus}
time.sleep(threads.PACE_SECONDS + 0.05)
layer(torch.zeros(1, 4))  # a sample to count from (the import took long enough to make the first one stale)
write(1000.0)  # every CPU busy with other processes' work
time.sleep(threads.PACE_SECONDS + 0.05)
layer(torch.zeros(1, 4))  # a module call paces the calling thread
seen["main_busy"] = torch.get_num_threads()
def in_thread():
    layer(torch.zeros(1, 4))
    seen["thread_busy"] = torch.get_num_threads()
t = threading.Thread(target=in_thread); t.start(); t.join()
time.sleep(threads.PACE_SECONDS + 0.05)  # the counters stand still: only this process ran
layer(torch.zeros(1, 4))
seen["main_quiet"] = torch.get_num_threads()
print(json.dumps(seen))
"""


def test_a_command_paces_every_thread_that_runs_a_module_from_when_torch_loads(tmp_path):
    """In a fresh Python that calls configure_threads before `import torch` (as the commands do):
    the forward pre-hook is in place once torch loads, and the count reaches the main thread and
    another thread; with the counters quiet again, the main thread goes back to every CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("CATCAP_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = SRC
    proc = subprocess.run([sys.executable, "-c", PACED, str(tmp_path / "stat")], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    cpus = seen["cpus"]
    if cpus < 2:
        pytest.skip("one CPU: nothing to pace")
    assert seen["paced"] and not seen["torch_before"]
    assert (seen["main_busy"], seen["thread_busy"], seen["main_quiet"]) == (1, 1, cpus)


# --- what the policy sets ---------------------------------------------------------------------

def test_the_policy_sets_no_variable_when_the_affinity_is_the_limit():
    assert policy_env({}, cpus=2, affinity=2) == {}


def test_a_quota_below_the_affinity_mask_sets_the_thread_count():
    assert policy_env({}, cpus=3, affinity=64) == {"OMP_NUM_THREADS": "3"}


@pytest.mark.parametrize("var", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_thread_count_of_the_user_is_kept_and_not_paced(var, monkeypatch, tmp_path):
    assert policy_env({var: "8"}, cpus=2, affinity=64) == {}
    monkeypatch.setattr(threads, "start_pacing", lambda share: pytest.fail("paced a user's thread count"))
    assert not configure_threads(environ={var: "8"}).paced


def test_configure_threads_paces_where_the_counters_can_be_read(monkeypatch, tmp_path):
    monkeypatch.setattr(threads, "_affinity_count", lambda: 4)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda *a: None)
    started = []
    monkeypatch.setattr(threads, "start_pacing", lambda share: started.append(share) or share.readable())
    env = {"HOME": "/x"}
    _stat(tmp_path / "stat", {0: 1.0})
    policy = configure_threads(environ=env, stat=tmp_path / "stat")
    assert env == {"HOME": "/x"} and started and started[0].cpus == 4
    assert (policy.choice, policy.cpus, policy.env, policy.threads, policy.paced) == ("catcap", 4, {}, None, True)
    assert not configure_threads(environ={}, stat=tmp_path / "missing").paced


def test_under_a_quota_the_quota_caps_and_nothing_is_paced(monkeypatch):
    monkeypatch.setattr(threads, "_affinity_count", lambda: 8)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda *a: 2.0)
    monkeypatch.setattr(threads, "_torch_loaded", lambda: False)
    monkeypatch.setattr(threads, "start_pacing", lambda share: pytest.fail("paced under a quota"))
    env = {}
    policy = configure_threads(environ=env)
    assert env == {"OMP_NUM_THREADS": "2"} and policy.threads == 2 and not policy.paced


# --- the opt-out and wrong values ---------------------------------------------------------------

def test_torch_keeps_every_default(monkeypatch):
    monkeypatch.setattr(threads, "start_pacing", lambda share: pytest.fail("paced with CATCAP_THREADS=torch"))
    env = {"CATCAP_THREADS": "torch"}
    policy = configure_threads(environ=env)
    assert env == {"CATCAP_THREADS": "torch"} and policy.env == {} and policy.threads is None and not policy.paced
    env = {}
    assert configure_threads("torch", environ=env).choice == "torch" and env == {}


def test_a_wrong_choice_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="CATCAP_THREADS must be one of catcap, torch, got 'fast'"):
        configure_threads("fast", environ={})
    env = {**os.environ, "CATCAP_THREADS": "fast", "PYTHONPATH": SRC}
    proc = subprocess.run([sys.executable, "-m", "catcap", "zoo", "list"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "CATCAP_THREADS must be one of catcap, torch" in proc.stderr and "CATCAP_THREADS=torch" in proc.stderr


def test_main_called_from_python_leaves_the_callers_threads_alone(monkeypatch):
    """Tests and scripts call main([...]) in their own process: no pacing is started there."""
    monkeypatch.setattr(threads, "configure_threads", lambda *a, **k: pytest.fail("configured the caller's threads"))
    monkeypatch.setattr("catcap.cli.main.configure_threads", threads.configure_threads)
    assert main(["zoo", "list"]) == 0


def test_the_commands_load_no_torch_before_the_policy():
    """The `catcap` entry point imports no torch before main() applies the policy (a command that
    loads torch afterwards gets the pacing hook: the test above)."""
    code = ("import sys; import catcap.cli.main as m; assert 'torch' not in sys.modules, 'torch loaded early'; "
            f"sys.argv = ['catcap', 'validate-config', '--config', {str(TINY)!r}, '--no-data']; m.main(); "
            "assert 'torch' in sys.modules, 'torch never loaded'; from catcap import threads; "
            "print(threads.paced_threads() is not None)")
    env = {k: v for k, v in os.environ.items() if k not in ("CATCAP_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = SRC
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == str(os.path.exists("/proc/stat") and available_cpus() > 1)


def test_with_torch_loaded_the_thread_count_is_still_capped(monkeypatch):
    import torch

    monkeypatch.setattr(threads, "_affinity_count", lambda: 2)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda *a: 1.0)
    monkeypatch.setattr(threads, "_torch_loaded", lambda: True)
    before = torch.get_num_threads()
    try:
        policy = configure_threads(environ={})
        assert policy.threads == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# --- CPUs: affinity mask and cgroup quotas ----------------------------------------------------

def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_cgroup_v2_quota_of_the_process_and_the_smallest_above_it(tmp_path):
    _write(tmp_path / "cpu.max", "max 100000")
    _write(tmp_path / "user.slice" / "cpu.max", "300000 100000")
    _write(tmp_path / "user.slice" / "job" / "cpu.max", "max 100000")
    assert cgroup_cpu_limit("0::/user.slice/job\n", tmp_path) == 3.0
    _write(tmp_path / "user.slice" / "job" / "cpu.max", "150000 100000")
    assert cgroup_cpu_limit("0::/user.slice/job\n", tmp_path) == 1.5


def test_cgroup_v2_without_a_quota_or_files_is_no_limit(tmp_path):
    _write(tmp_path / "cpu.max", "max 100000")
    assert cgroup_cpu_limit("0::/\n", tmp_path) is None
    assert cgroup_cpu_limit("0::/not/here\n", tmp_path / "nothing") is None
    assert cgroup_cpu_limit("", tmp_path) is None


def test_inside_a_container_the_mount_is_the_containers_own_cgroup(tmp_path):
    _write(tmp_path / "cpu.max", "200000 100000")  # the host's path of the cgroup is not under the mount
    assert cgroup_cpu_limit("0::/docker/0123abcd\n", tmp_path) == 2.0


def test_cgroup_v1_quota(tmp_path):
    mount = tmp_path / "cpu,cpuacct"
    _write(mount / "cpu.cfs_quota_us", "-1")
    _write(mount / "cpu.cfs_period_us", "100000")
    _write(mount / "batch" / "cpu.cfs_quota_us", "50000")
    _write(mount / "batch" / "cpu.cfs_period_us", "100000")
    text = "12:memory:/batch\n4:cpu,cpuacct:/batch\n0::/\n"
    assert cgroup_cpu_limit(text, tmp_path) == 0.5
    _write(mount / "batch" / "cpu.cfs_quota_us", "-1")
    assert cgroup_cpu_limit(text, tmp_path) is None


def test_cgroup_v1_under_a_cpu_mount_and_malformed_files(tmp_path):
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "250000")
    _write(tmp_path / "cpu" / "cpu.cfs_period_us", "100000")
    assert cgroup_cpu_limit("3:cpu:/\n", tmp_path) == 2.5
    _write(tmp_path / "cpu" / "cpu.cfs_quota_us", "lots")
    assert cgroup_cpu_limit("3:cpu:/\n", tmp_path) is None


def test_available_cpus_is_the_affinity_capped_by_the_quota_rounded_up():
    assert available_cpus(affinity=8, quota=1.5) == 2
    assert available_cpus(affinity=8, quota=0.25) == 1
    assert available_cpus(affinity=2, quota=16.0) == 2
    assert available_cpus(affinity=4, proc_cgroup="", root=Path("/nonexistent")) == 4


def test_available_cpus_of_this_process_is_at_most_its_affinity():
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


# --- workers ------------------------------------------------------------------------------------

def test_default_worker_counts_stay_within_the_cpus(monkeypatch):
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    assert default_workers(2) == 1 and default_workers(0) == 0
    monkeypatch.setattr(threads, "available_cpus", lambda: 16)
    assert default_workers(2) == 2


def test_the_commands_default_workers_follow_the_cpus(monkeypatch):
    from catcap.cli.main import build_parser

    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    assert threads.photo_readers() == 1
    monkeypatch.setattr(threads, "available_cpus", lambda: 8)
    assert threads.photo_readers() == 2
    assert build_parser().parse_args(["extract", "--images", "x", "--out", "y.h5"]).workers == 2
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    assert build_parser().parse_args(["extract", "--images", "x", "--out", "y.h5"]).workers == 1


def test_a_compiled_model_traces_through_the_pacing_hook_without_a_break(tmp_path):
    """torch.compile traces the global hook: inside the trace it does nothing (no graph break on
    the clock read, no warning), and the compiled module computes what the eager one does."""
    code = ("import warnings; warnings.simplefilter('always'); import catcap; p = catcap.configure_threads(); "
            "import torch; torch.manual_seed(0); "
            "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)); "
            "x = torch.randn(4, 8); c = torch.compile(m, backend='eager', fullgraph=True); "
            "print(p.paced, torch.equal(c(x), m(x)))")
    env = {k: v for k, v in os.environ.items() if k not in ("CATCAP_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = SRC
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]  # fullgraph=True: a graph break is an error
    paced, equal = proc.stdout.split()
    assert equal == "True" and "global hooks" not in proc.stderr and "monotonic" not in proc.stderr, proc.stderr
    assert paced == str(os.path.exists("/proc/stat") and available_cpus() > 1)
