"""A torchrun run killed mid-training (every process, SIGKILL) and resumed under torchrun ends
with the same weights as an uninterrupted one: weights, Adam, position and every rank's RNG."""

import json
import time

import pytest
import torch

from catcap.training.checkpoint import load_checkpoint
from ddp_helpers import catcap_train, kill_all, tiny_args
from tiny_runs import kill_step


def _last_step(log):
    if not log.exists():
        return 0
    return max((json.loads(line)["step"] for line in log.read_text().splitlines() if line.strip()), default=0)


@pytest.mark.parametrize("variant", [{}, {"model.cross_attention": "caca", "train.awc.enabled": "true"}],
                         ids=["transformer", "cat-awc"])
def test_kill_and_resume_under_torchrun(dist_world, tmp_path, variant):
    extra = {"train.epochs": 2, "train.save_every": 1, **variant}  # dropout 0.1: per-rank RNG streams matter
    full = tmp_path / "full"
    catcap_train(tiny_args(dist_world, full, **extra), nproc=2)

    out = tmp_path / "killed"
    args = tiny_args(dist_world, out, **extra)
    kill_at, seed = kill_step(5, 80)  # 100 steps in all (2 epochs x 50 global batches)
    proc = catcap_train(args, nproc=2, wait=False)
    deadline = time.time() + 300
    while _last_step(out / "log.jsonl") < kill_at and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    kill_all(proc)
    killed_at = load_checkpoint(out / "last", with_trainer=True)["trainer"]["position"]["step"]
    assert 0 < killed_at < 100, f"not interrupted mid-training (checkpoint at step {killed_at}, seed {seed})"
    resumed = catcap_train(args + ["--resume"], nproc=2)
    assert f"resumed {out / 'last'} at step {killed_at}" in resumed.output

    a = load_checkpoint(full / "last", with_trainer=True)
    b = load_checkpoint(out / "last", with_trainer=True)
    assert a["trainer"]["position"] == b["trainer"]["position"]
    assert len(b["trainer"]["rng_ranks"]) == 2
    assert not torch.equal(b["trainer"]["rng_ranks"][0], b["trainer"]["rng_ranks"][1])
    for name, tensor in a["weights"].items():
        assert torch.equal(tensor, b["weights"][name]), f"{name} differs (killed at step {killed_at}, seed {seed})"
