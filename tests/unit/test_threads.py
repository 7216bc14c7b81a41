"""catcap.threads: what the policy sets and what it leaves, that it reaches OpenMP when torch
loads (and only then), the CPU count from the affinity mask and cgroup quotas (fake cgroup
trees), and the worker budget. No speed is asserted here (benchmarks/contention.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from catcap import threads
from catcap.cli.main import main
from catcap.threads import (WAIT_SETTINGS, available_cpus, cgroup_cpu_limit, configure_threads, default_workers,
                            policy_env)

SRC = str(Path(threads.__file__).resolve().parents[1])
TINY = Path(threads.__file__).resolve().parents[2] / "configs" / "models" / "tiny.yaml"


# --- what the policy sets ---------------------------------------------------------------------

def test_the_policy_sets_the_wait_settings_and_no_thread_count_when_the_affinity_is_the_limit():
    assert policy_env({}, cpus=2, affinity=2) == WAIT_SETTINGS
    assert WAIT_SETTINGS == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "1000"}


def test_a_quota_below_the_affinity_mask_sets_the_thread_count():
    assert policy_env({}, cpus=3, affinity=64) == {**WAIT_SETTINGS, "OMP_NUM_THREADS": "3"}


@pytest.mark.parametrize("var", ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"])
def test_a_wait_setting_of_the_user_is_kept(var):
    env = {var: "ACTIVE" if var == "OMP_WAIT_POLICY" else "200"}
    assert policy_env(env, cpus=2, affinity=2) == {}
    assert policy_env(env, cpus=1, affinity=2) == {"OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("var", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_a_thread_count_of_the_user_is_kept(var):
    assert policy_env({var: "8"}, cpus=2, affinity=64) == WAIT_SETTINGS


def test_configure_threads_writes_the_variables_into_the_environment_given(monkeypatch):
    monkeypatch.setattr(threads, "_affinity_count", lambda: 4)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda *a: None)
    monkeypatch.setattr(threads, "_torch_loaded", lambda: False)  # as in a `catcap` command: torch not loaded yet
    env = {"HOME": "/x"}
    policy = configure_threads(environ=env)
    assert env == {"HOME": "/x", **WAIT_SETTINGS}
    assert (policy.choice, policy.cpus, policy.env, policy.threads, policy.wait_in_effect) == \
        ("catcap", 4, WAIT_SETTINGS, None, True)


# --- the opt-out and wrong values ---------------------------------------------------------------

def test_torch_keeps_every_default():
    env = {"CATCAP_THREADS": "torch"}
    policy = configure_threads(environ=env)
    assert env == {"CATCAP_THREADS": "torch"} and policy.env == {} and policy.threads is None
    env = {}
    assert configure_threads("torch", environ=env).choice == "torch" and env == {}


def test_a_wrong_choice_is_refused_with_the_fix(monkeypatch, capsys):
    with pytest.raises(ValueError, match="CATCAP_THREADS must be one of catcap, torch, got 'fast'"):
        configure_threads("fast", environ={})
    monkeypatch.setenv("CATCAP_THREADS", "fast")
    assert main(["zoo", "list"]) == 2
    err = capsys.readouterr().err
    assert "CATCAP_THREADS must be one of catcap, torch" in err and "CATCAP_THREADS=torch" in err


# --- it reaches OpenMP when torch loads -------------------------------------------------------

def _openmp_settings(code: str, **env) -> dict[str, str]:
    """OpenMP's settings as libgomp reports them when it loads (OMP_DISPLAY_ENV), in a fresh
    Python that runs ``code``; its stderr's other lines (e.g. a warning) under "stderr"."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CATCAP_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS")}
    clean.update(env, OMP_DISPLAY_ENV="VERBOSE", PYTHONPATH=SRC)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean, check=True)
    found = {"stderr": proc.stderr}
    for line in proc.stderr.splitlines():
        name, eq, value = line.strip().partition(" = ")
        if eq:
            found[name] = value.strip("'")
    return found


def test_called_before_import_torch_openmp_reads_the_policy():
    code = ("import sys, catcap; catcap.configure_threads(); "
            "assert not [m for m in sys.modules if m == 'torch' or m.startswith('catcap.') and m != 'catcap.threads']; "
            "import torch")
    found = _openmp_settings(code)
    assert (found["OMP_WAIT_POLICY"], found["GOMP_SPINCOUNT"]) == ("PASSIVE", "1000")


def test_torch_keeps_libgomps_spinning_default():
    found = _openmp_settings("import catcap; catcap.configure_threads(); import torch", CATCAP_THREADS="torch")
    assert found["GOMP_SPINCOUNT"] == "300000"


def test_called_after_import_torch_it_comes_too_late_and_says_so():
    found = _openmp_settings("import torch, catcap; p = catcap.configure_threads(); print(p.wait_in_effect)")
    assert found["GOMP_SPINCOUNT"] == "300000"
    assert "called after `import torch`" in found["stderr"] and "OMP_WAIT_POLICY=PASSIVE" in found["stderr"]


def test_the_commands_apply_it_before_torch_loads():
    """The `catcap` entry point imports no torch before main() applies the policy, and a command
    that loads torch then runs with it."""
    code = ("import sys; import catcap.cli.main as m; assert 'torch' not in sys.modules, 'torch loaded early'; "
            f"m.main(['validate-config', '--config', {str(TINY)!r}, '--no-data']); assert 'torch' in sys.modules, 'torch never loaded'")
    found = _openmp_settings(code)
    assert (found["OMP_WAIT_POLICY"], found["GOMP_SPINCOUNT"]) == ("PASSIVE", "1000")


def test_with_torch_loaded_the_thread_count_is_still_capped(monkeypatch):
    import torch

    monkeypatch.setattr(threads, "_affinity_count", lambda: 2)
    monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda *a: 1.0)
    monkeypatch.setattr(threads, "_torch_loaded", lambda: True)
    before = torch.get_num_threads()
    try:
        with pytest.warns(RuntimeWarning, match="called after `import torch`"):
            policy = configure_threads(environ={})
        assert policy.threads == 1 and torch.get_num_threads() == 1 and not policy.wait_in_effect
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
    from catcap.cli import caption_cmds
    from catcap.cli.main import build_parser

    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    assert caption_cmds.default_workers() == 1
    monkeypatch.setattr(threads, "available_cpus", lambda: 8)
    assert caption_cmds.default_workers() == 2
    assert build_parser().parse_args(["extract", "--images", "x", "--out", "y.h5"]).workers == 2
    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    assert build_parser().parse_args(["extract", "--images", "x", "--out", "y.h5"]).workers == 1
