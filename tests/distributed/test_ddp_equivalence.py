"""torchrun with 2 gloo processes trains the same model as one process with the same global batch."""

import json

import pytest
import torch

from catcap.training.checkpoint import load_checkpoint
from ddp_helpers import catcap_train, tiny_args

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")

# Key biases get a gradient that is zero in exact arithmetic (softmax ignores a constant added to
# every score), so float noise of ~1e-10 is all they see; Adam's first steps turn that noise into
# updates of about the learning rate, in directions that differ between reduction orders, and
# they change nothing the model computes. Every other weight must agree.
INVARIANT = "k_proj.bias"


def _log(run, kind="train"):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if json.loads(line)["kind"] == kind]


def _compare_weights(a_dir, b_dir, atol=2e-5):
    a, b = load_checkpoint(a_dir)["weights"], load_checkpoint(b_dir)["weights"]
    assert a.keys() == b.keys()
    checked = 0
    for name in a:
        if not name.endswith(INVARIANT):
            diff = float((a[name] - b[name]).abs().max())
            assert diff <= atol, f"{name} differs by {diff:.3g}"
            checked += 1
    assert checked > 10


@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_processes_equal_one_process(dist_world, tmp_path, accumulate):
    extra = {"model.dropout": 0, "train.max_steps": 10}
    one = tmp_path / "one"
    catcap_train(tiny_args(dist_world, one, **extra))
    two = tmp_path / "two"
    run = catcap_train(tiny_args(dist_world, two, **extra, **{"train.accumulate": accumulate}), nproc=2)
    assert "2 processes (cpu); global batch 12" in run.output
    assert run.output.count("done: 10 steps") == 1  # rank 0 alone reports
    _compare_weights(one / "last", two / "last")
    l1, l2 = _log(one), _log(two)
    assert [r["step"] for r in l1] == [r["step"] for r in l2] == list(range(1, 11))  # rank 0 alone logs
    for a, b in zip(l1, l2):  # the logged loss is the global batch's, not one shard's
        assert a["xe"] == pytest.approx(b["xe"], rel=1e-5)
    assert {p.name for p in two.iterdir()} >= {"last", "log.jsonl"}


def test_gathered_validation_scores_every_image_once(dist_world, tmp_path):
    """A full epoch then validation on 30 images split over 2 processes (15 + 15)."""
    extra = {"model.dropout": 0, "data.val_split": "test"}
    one, two = tmp_path / "one", tmp_path / "two"
    catcap_train(tiny_args(dist_world, one, **extra))
    catcap_train(tiny_args(dist_world, two, **extra, **{"train.eval_batch_size": 4}), nproc=2)
    _compare_weights(one / "last", two / "last", atol=1e-4)
    v2, v1 = _log(two, "val"), _log(one, "val")
    assert len(v2) == len(v1) == 1
    for key in ("Bleu_4", "ROUGE_L", "CIDEr"):
        assert v2[0][key] == pytest.approx(v1[0][key], abs=1e-9), key


def test_accumulation_in_one_process_equals_the_full_batch(dist_world, tmp_path):
    extra = {"model.dropout": 0, "train.max_steps": 8}
    catcap_train(tiny_args(dist_world, tmp_path / "full", **extra))
    catcap_train(tiny_args(dist_world, tmp_path / "acc", **extra, **{"train.accumulate": 3}))
    _compare_weights(tmp_path / "full" / "last", tmp_path / "acc" / "last")
