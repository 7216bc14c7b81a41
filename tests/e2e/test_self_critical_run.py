"""SCST on the built-in world: started from a short XE run, it raises validation CIDEr-D."""

import json
import subprocess
import sys

import pytest

from catcap.data.synthetic import make_world


def val_ciders(log):
    return [json.loads(line)["CIDEr"] for line in log.read_text().splitlines() if '"kind": "val"' in line]


def train(args):
    proc = subprocess.run([sys.executable, "-m", "catcap", "train", *args], capture_output=True, text=True, timeout=600)
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
    xe = tmp_path / "xe"
    train(tiny_overrides(scst_world, xe, **{"train.epochs": 4}))
    start = val_ciders(xe / "log.jsonl")[-1]  # SCST starts from XE's last epoch
    scst = tmp_path / "scst"
    out = train(tiny_overrides(scst_world, scst, **{
        # from the last XE epoch: with this deliberately high rate (a gain within 3 tiny epochs), the
        # epoch-2 checkpoint (the best by val CIDEr-D) falls into a greedy loop ("a green star a green
        # star ...", val CIDEr-D 0.03) in 10 steps; measured the same before and after the DDP trainer
        "train.epochs": 3, "train.objective": "scst", "train.init_from": xe / "last", "train.scst.lr": "5e-4"}))
    assert "weights and vocabulary from" in out
    ciders = val_ciders(scst / "log.jsonl")
    # measured 2026-11-22: 0.295 -> 0.249 / 0.292 / 0.377 (MKL products), 0.353 -> 0.401 / 0.412 /
    # 0.330 (oneDNN products, catcap.models.linear)
    assert max(ciders) > start + 0.03, (start, ciders)
    steps = [json.loads(line) for line in (scst / "log.jsonl").read_text().splitlines() if '"kind": "train"' in line]
    assert all(s["phase"] == "scst" and {"reward", "baseline", "advantage", "eos_fraction", "length", "entropy"} <= s.keys()
               for s in steps)
    assert list(scst_world.dataset.parent.glob("*.train.*.cider-df.npz")), "df cached next to the data"
