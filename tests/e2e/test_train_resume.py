"""A run killed with SIGKILL at a random step and resumed ends with the same weights.

Oracle: the same run left uninterrupted (weights, optimizer position, AWC betas and log must be
identical). The kill step comes from a printed seed (``CATCAP_KILL_SEED`` replays it)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from catcap.training.checkpoint import load_checkpoint
from tiny_runs import kill_step


def run_train(args, **popen):
    return subprocess.Popen([sys.executable, "-m", "catcap", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **popen)


def last_logged_step(log):
    if not log.exists():
        return 0
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines() if line.strip()]
    return max(steps, default=0)


def _records(log):
    """The log's records without their timing field (batches_per_s differs between runs)."""
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k != "batches_per_s"} for r in rows]


VARIANTS = {"transformer": {}, "cat-awc": {"model.cross_attention": "caca", "train.awc.enabled": "true"},
            # epoch 1 XE, epoch 2 SCST: a kill can land in either phase
            "xe-then-scst": {"train.objective": "xe_then_scst", "train.scst.switch_patience": 0},
            # wide enough that the decoder's products reach catcap.models.linear.MIN_MACS: on a CPU
            # where catcap picks oneDNN (non-Intel with AVX-512) they run there, forward and backward
            "d128": {"model.d_model": 128, "model.d_ff": 256, "model.num_heads": 4},
            # an LSTM decoder whose second epoch feeds back half its own words: the draws come
            # from the global generator, restored on resume like dropout's
            "updown-caca-sampling": {"model.encoder": "embed", "model.decoder": "updown", "model.decoder_layers": 1,
                                     "model.cross_attention": "caca", "model.rnn.word_dim": 16,
                                     "model.rnn.att_hidden": 16, "train.awc.enabled": "true",
                                     "train.schedule.name": "step", "train.schedule.lr": 1e-3,
                                     "train.scheduled_sampling.enabled": "true", "train.scheduled_sampling.every": 1,
                                     "train.scheduled_sampling.increase": 0.5, "train.scheduled_sampling.max_prob": 0.5},
            # VLP's masked-token pre-training: the masks and the mask kind are drawn from the step
            "vlp-mlm": {"model.encoder": "vlp_regions", "model.decoder": "vlp", "train.mlm.enabled": "true"}}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_kill_and_resume_gives_identical_weights(tiny_world, tiny_overrides, tmp_path, variant):
    full = run_train(tiny_overrides(tiny_world, tmp_path / "full", **VARIANTS[variant]))
    assert full.wait(timeout=300) == 0, full.stdout.read()

    out = tmp_path / "killed"
    args = tiny_overrides(tiny_world, out, **{"train.save_every": 1, **VARIANTS[variant]})
    kill_at, seed = kill_step(3, 16)  # 20 steps in all (2 epochs x 10 batches)
    proc = run_train(args)
    deadline = time.time() + 300
    while last_logged_step(out / "log.jsonl") < kill_at and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = load_checkpoint(out / "last", with_trainer=True)["trainer"]["position"]["step"]
    assert 0 < killed_at < 20, f"the run was not interrupted mid-training (checkpoint at step {killed_at}, seed {seed})"
    resumed = run_train(args + ["--resume"])
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output
    assert f"resumed {out / 'last'} at step {killed_at}" in output

    a = load_checkpoint(tmp_path / "full" / "last", with_trainer=True)
    b = load_checkpoint(out / "last", with_trainer=True)
    assert a["trainer"]["position"] == b["trainer"]["position"]
    for name, tensor in a["weights"].items():
        assert torch.equal(tensor, b["weights"][name]), f"{name} differs (killed at step {killed_at}, seed {seed})"
    if variant in ("cat-awc", "updown-caca-sampling"):  # the learnable AWC betas are resumed too
        assert torch.equal(a["trainer"]["awc"]["beta"], b["trainer"]["awc"]["beta"])
        assert not torch.equal(a["trainer"]["awc"]["beta"], torch.full_like(a["trainer"]["awc"]["beta"], 0.5))

    # the log continues from the checkpoint: every step once, the same numbers as the uninterrupted run
    full_log, resumed_log = _records(tmp_path / "full" / "log.jsonl"), _records(out / "log.jsonl")
    steps = [r["step"] for r in resumed_log if r["kind"] == "train"]
    assert steps == list(range(1, a["trainer"]["position"]["step"] + 1))
    assert resumed_log == full_log

    # machine.jsonl: a line per start (the killed one from step 0, the resumed one from its checkpoint)
    starts = _machine_lines(out)
    assert [(m["step"], m["resumed"]) for m in starts] == [(0, False), (killed_at, True)], starts
    assert [(m["step"], m["resumed"]) for m in _machine_lines(tmp_path / "full")] == [(0, False)]


def _machine_lines(run):
    """``run/machine.jsonl``, each line checked to name what computed the run."""
    lines = [json.loads(line) for line in (run / "machine.jsonl").read_text().splitlines()]
    for m in lines:
        assert m["torch"] == torch.__version__ and m["device"] == "cpu" and m["processes"] == 1, m
        assert m["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and m["cpu"], m
        assert m["torch_threads"] >= 1 and m["cpu_gemm"] in ("torch", "onednn") and m["phase"] in ("xe", "scst"), m
    return lines


def test_a_new_run_in_the_same_folder_starts_its_own_log(tiny_world, tiny_overrides, tmp_path):
    args = tiny_overrides(tiny_world, tmp_path / "run", **{"train.max_steps": 3, "train.epochs": 1})
    for _ in range(2):
        proc = run_train(args)
        output = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, output
    assert "an earlier run's log" in output and "moved to log." in output
    assert "holds checkpoints of an earlier run (last); this new run replaces them" in output
    logs = sorted(p.name for p in (tmp_path / "run").glob("log*.jsonl"))
    assert len(logs) == 2 and "log.jsonl" in logs
    for name in logs:  # each log holds one run: steps 1, 2, 3 once
        assert [r["step"] for r in _records(tmp_path / "run" / name) if r["kind"] == "train"] == [1, 2, 3]
    machines = sorted(p.name for p in (tmp_path / "run").glob("machine*.jsonl"))  # and its own machine line
    assert len(machines) == 2 and "machine.jsonl" in machines
    for name in machines:
        assert [(m["step"], m["resumed"]) for m in map(json.loads, (tmp_path / "run" / name).read_text().splitlines())] \
            == [(0, False)]


def test_resume_refuses_a_different_model_before_loading_it(tiny_world, tiny_overrides, tmp_path):
    args = tiny_overrides(tiny_world, tmp_path / "run", **{"train.max_steps": 2, "train.epochs": 1})
    proc = run_train(args)
    assert proc.wait(timeout=300) == 0
    changed = run_train([*args, "model.d_model=16", "model.d_ff=48", "--resume"])
    output = changed.communicate(timeout=300)[0]
    assert changed.returncode == 2, output
    assert "Traceback" not in output
    assert "model.d_model is 32 in the checkpoint, 16 in the config" in output
    assert "model.d_ff is 64 in the checkpoint, 48 in the config" in output
    assert load_checkpoint(tmp_path / "run" / "last")["config"]["model"]["d_model"] == 32  # untouched
    # a dropout change is allowed (the weights fit) and said
    proc = run_train([*args, "model.dropout=0.3", "train.max_steps=3", "--resume"])
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    assert "resuming with model.dropout changed from 0.1 to 0.3" in output


def test_init_from_a_checkpoint_of_another_size_names_the_settings(tiny_world, tiny_overrides, tmp_path):
    from catcap import api

    args = tiny_overrides(tiny_world, tmp_path / "xe", **{"train.max_steps": 1, "train.epochs": 1})
    api.train(None, args, log=lambda m: None)
    other = tiny_overrides(tiny_world, tmp_path / "ft", **{"train.max_steps": 1, "train.epochs": 1, "model.d_ff": 48,
                                                           "train.init_from": tmp_path / "xe" / "last"})
    with pytest.raises(ValueError, match=r"its weights do not fit .*model\.d_ff is 64 in the checkpoint, 48 in the config"):
        api.train(None, other, log=lambda m: None)


def test_a_run_too_short_to_log_or_validate_ends_cleanly(tiny_world, tiny_overrides, tmp_path):
    args = tiny_overrides(tiny_world, tmp_path / "run", **{"train.max_steps": 2, "train.log_every": 20})
    proc = run_train(args)
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    assert "done: 2 steps, no validation ran" in output and "nothing logged yet" in output
    assert (tmp_path / "run" / "last" / "model.safetensors").exists()


def test_init_from_and_the_switch_to_scst_keep_the_learned_awc_betas(tiny_world, tiny_overrides, tmp_path):
    from catcap import api

    cat = {"model.cross_attention": "caca", "train.awc.enabled": "true", "train.epochs": 1}
    api.train(None, tiny_overrides(tiny_world, tmp_path / "xe", **cat), log=lambda m: None)
    learned = load_checkpoint(tmp_path / "xe" / "best", with_trainer=True)["trainer"]["awc"]["beta"]
    assert not torch.allclose(learned, torch.full_like(learned, 0.5))
    logs = []
    api.train(None, tiny_overrides(tiny_world, tmp_path / "ft", **{**cat, "train.max_steps": 1,
                                                                   "train.init_from": tmp_path / "xe" / "best",
                                                                   "train.schedule.name": "constant",
                                                                   "train.schedule.lr": 0.0}), log=logs.append)
    assert any("AWC betas from" in m for m in logs)
    started = load_checkpoint(tmp_path / "ft" / "last", with_trainer=True)["trainer"]["awc"]["beta"]
    torch.testing.assert_close(started, learned)  # lr 0: the loaded betas are what the run holds


def test_resume_says_every_changed_setting_and_refuses_another_objective(tiny_world, tiny_overrides, tmp_path):
    from catcap import api

    xe = tiny_overrides(tiny_world, tmp_path / "xe", **{"train.max_steps": 1, "train.epochs": 1})
    api.train(None, xe, log=lambda m: None)
    scst = {"train.objective": "scst", "train.init_from": tmp_path / "xe" / "last", "train.epochs": 1,
            "train.scst.lr": "1e-5"}
    api.train(None, tiny_overrides(tiny_world, tmp_path / "scst", **scst, **{"train.max_steps": 2}), log=lambda m: None)
    # SCST's rate is fixed, and the optimizer state would bring the old one back: the config's wins
    logs = []
    api.train(None, tiny_overrides(tiny_world, tmp_path / "scst", **{**scst, "train.scst.lr": "3e-5",
                                                                     "train.max_steps": 4}), resume=True, log=logs.append)
    assert "[catcap] resuming with train.scst.lr changed from 1e-05 to 3e-05" in logs
    assert "[catcap] resuming with train.max_steps changed from 2 to 4" in logs
    rates = {r["step"]: r["lr"] for r in _records(tmp_path / "scst" / "log.jsonl") if r["kind"] == "train"}
    assert rates == {1: 1e-5, 2: 1e-5, 3: 3e-5, 4: 3e-5}
    # an XE run resumed as SCST would silently have gone on with XE (the phase is saved)
    with pytest.raises(ValueError, match=r"train\.objective is 'xe' in the checkpoint, 'scst' in the config.*"
                                         r"train\.init_from=<this run>/best"):
        api.train(None, xe + ["train.objective=scst", "train.max_steps=2"], resume=True, log=lambda m: None)
    # ... but an XE run may go on into SCST
    api.train(None, xe + ["train.objective=xe_then_scst", "train.max_steps=2"], resume=True, log=logs.append)
    assert "[catcap] resuming with train.objective changed from 'xe' to 'xe_then_scst'" in logs
