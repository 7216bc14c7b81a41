"""SCST on the built-in world: started from a short XE run, it raises the reward it optimises."""

import json
import os
import subprocess
import sys

import pytest
import torch

from catcap.data.synthetic import make_world


def val_ciders(log):
    return [json.loads(line)["CIDEr"] for line in log.read_text().splitlines() if '"kind": "val"' in line]


def train(args):
    """``catcap train`` in a subprocess on one thread: the thread count changes the float rounding
    of the products, and at this size the rounding alone moves the scores (see below)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "catcap", "train", *args], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def scst_world(tmp_path_factory):
    """``tiny_world``'s training images with 150 validation images instead of 30: on 30, the
    validation CIDEr-D of one tiny model moves by up to 0.2 from epoch to epoch, and a change of
    float rounding alone (MKL vs oneDNN products) decided whether SCST's gain cleared the bar."""
    root = tmp_path_factory.mktemp("scst_world") / "shapes"
    return make_world(root, num_train=120, num_val=150, num_test=5, seed=3, feature_dim=32, progress=False)


def test_scst_from_a_short_xe_run_raises_validation_cider(scst_world, tiny_overrides, tmp_path):
    """SCST from an XE checkpoint, end to end: the start weights are scored first (the XE run's
    last score, by the same validation), SCST's signals are logged each step, and validation
    and the training reward rises over its steps. On this tiny model (30 SCST steps) the
    validation gain is small and depends on the seed and on the CPU's float rounding: over
    world seeds 3, 4, 5, 6 at this rate the best SCST epoch was +0.045, +0.013, 0.000, -0.018
    from the start (2026-11-22); `benchmarks/results/scst.md` has SCST's validation gains at a
    scale where they are reliable (+0.26 CIDEr-D on the demo's model)."""
    xe = tmp_path / "xe"
    train(tiny_overrides(scst_world, xe, **{"train.epochs": 4}))
    xe_last = val_ciders(xe / "log.jsonl")[-1]  # SCST starts from XE's last epoch
    scst = tmp_path / "scst"
    out = train(tiny_overrides(scst_world, scst, **{
        "train.epochs": 3, "train.objective": "scst", "train.init_from": xe / "last", "train.scst.lr": "2e-4"}))
    assert "weights and vocabulary from" in out and "start weights (train.init_from): val" in out
    records = [json.loads(line) for line in (scst / "log.jsonl").read_text().splitlines() if '"kind": "val"' in line]
    assert records[0]["phase"] == "start" and records[0]["step"] == 0
    start = records[0]["CIDEr"]
    assert abs(start - xe_last) < 1e-9, (start, xe_last)
    ciders = [r["CIDEr"] for r in records[1:]]
    assert len(ciders) == 3 and all(r["phase"] == "scst" for r in records[1:])
    steps = [json.loads(line) for line in (scst / "log.jsonl").read_text().splitlines() if '"kind": "train"' in line]
    assert all(s["phase"] == "scst" and {"reward", "baseline", "advantage", "eos_fraction", "length", "entropy"} <= s.keys()
               for s in steps)
    # What SCST optimises, on the images it trains on: the sampled captions' CIDEr-D reward rises.
    # (Validation CIDEr-D on 150 images is not a reliable bar at this size: with the same seed it
    # went 0.249 -> 0.294 on one CPU (2026-11-22) and 0.205 -> 0.202 on another (2026-11-26),
    # float rounding of the products alone; benchmarks/results/scst.md has the validation gains
    # at a scale where they are reliable.)
    rewards = [s["reward"] for s in steps]
    print(f"SCST validation CIDEr-D {start:.3f} -> {ciders}; train reward first/last 5 steps "
          f"{sum(rewards[:5]) / 5:.3f} / {sum(rewards[-5:]) / 5:.3f}")
    # measured 2026-11-26 (AMD EPYC, one thread), world seeds 3, 4, 5, 6: +0.036, +0.016, +0.013,
    # +0.044; an SCST with the advantage's sign flipped lowers it (-0.009). With two threads the
    # same seed gave -0.011: at 30 steps the rise is small next to rounding noise, hence one thread.
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5, rewards
    assert list(scst_world.dataset.parent.glob("*.train.*.cider-df.npz")), "df cached next to the data"


def test_best_keeps_the_start_weights_until_an_scst_epoch_beats_them(scst_world, tiny_overrides, tmp_path):
    """With a zero SCST rate no epoch can beat the start: best/ must still hold the start weights
    (before, the first SCST epoch always became "best", however it scored)."""
    from catcap import api
    from catcap.training.checkpoint import load_checkpoint

    api.train(None, tiny_overrides(scst_world, tmp_path / "xe", **{"train.epochs": 1}), log=lambda m: None)
    logs = []
    pos = api.train(None, tiny_overrides(scst_world, tmp_path / "scst", **{
        "train.epochs": 1, "train.objective": "scst", "train.init_from": tmp_path / "xe" / "last",
        "train.scst.lr": "0.0"}), log=logs.append)
    records = [json.loads(line) for line in (tmp_path / "scst" / "log.jsonl").read_text().splitlines()
               if '"kind": "val"' in line]
    assert [r["phase"] for r in records] == ["start", "scst"] and records[0]["CIDEr"] == records[1]["CIDEr"]
    assert pos.best_epoch == 0 and pos.stale_epochs == 1
    assert any(m.startswith("[catcap] start weights (train.init_from): val") for m in logs)
    start, best = load_checkpoint(tmp_path / "xe" / "last")["weights"], load_checkpoint(tmp_path / "scst" / "best")["weights"]
    assert start.keys() == best.keys() and all(torch.equal(start[k], best[k]) for k in start)
