"""Mixed precision on the CPU: bf16 autocast, fp16 with a gradient scaler, reduced-precision decoding."""

import json

import pytest
import torch

from catcap.api import load_experiment
from catcap.training.checkpoint import load_checkpoint
from catcap.training.loop import Trainer
from catcap.training.precision import Precision
from catcap.training.validate import decode_split
from ddp_helpers import tiny_args


def _train(world, out, **extra):
    cfg = load_experiment(None, tiny_args(world, out, **extra))
    trainer = Trainer(cfg, log=lambda *_: None)
    trainer.fit()
    return trainer


def _losses(out):
    return [json.loads(line)["xe"] for line in (out / "log.jsonl").read_text().splitlines()
            if json.loads(line)["kind"] == "train"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_training_follows_fp32(dist_world, tmp_path, precision):
    steps = {"train.max_steps": 30, "model.dropout": 0}
    _train(dist_world, tmp_path / "fp32", **steps)
    low = _train(dist_world, tmp_path / precision, **steps, **{"train.precision": precision})
    ref, got = _losses(tmp_path / "fp32"), _losses(tmp_path / precision)
    assert len(got) == 30 and all(torch.isfinite(torch.tensor(got)))
    assert got[-1] < got[0] - 0.5  # it learns
    assert got[-1] == pytest.approx(ref[-1], abs=0.1)  # and follows the fp32 run closely
    weights = load_checkpoint(tmp_path / precision / "last")["weights"]
    assert all(w.dtype == torch.float32 for w in weights.values())  # master weights stay fp32
    saved = load_checkpoint(tmp_path / precision / "last", with_trainer=True)["trainer"]
    if precision == "fp16":  # the gradient scaler's state is saved for resume
        assert saved["precision"]["scale"] > 0 and low.precision.scaler.is_enabled()
    else:
        assert "precision" not in saved


def test_fp16_resume_restores_the_loss_scale(dist_world, tmp_path):
    extra = {"train.max_steps": 6, "train.precision": "fp16"}
    first = _train(dist_world, tmp_path / "run", **extra)
    scale = first.precision.scaler.get_scale()
    cfg = load_experiment(None, tiny_args(dist_world, tmp_path / "run", **{**extra, "train.max_steps": 8}))
    again = Trainer(cfg, resume=True, log=lambda *_: None)
    assert again.precision.scaler.get_scale() == scale and again.pos.step == 6


def test_bf16_decoding_agrees_with_fp32(dist_world, tmp_path):
    """Greedy captions of the 30 test images with the fp32 weights, decoded in fp32 and under bf16
    autocast. bf16 keeps 8 bits of mantissa, so near-ties between two words can flip; the share
    of identical captions is what docs/distributed.md reports."""
    trainer = _train(dist_world, tmp_path / "m", **{"train.epochs": 2, "data.val_split": "test"})
    data = trainer.data
    args = (trainer.model, data.val, data.vocab, torch.device("cpu"), 10, 20)
    _, fp32, _ = decode_split(*args)
    _, bf16, _ = decode_split(*args, autocast=Precision("bf16", torch.device("cpu")).autocast)
    same = sum(a == b for a, b in zip(fp32, bf16)) / len(fp32)
    print(f"bf16 vs fp32 greedy captions identical: {same:.2%} of {len(fp32)}")
    assert len(fp32) == 30 and same >= 0.8


def test_bad_precision_is_refused_before_training(dist_world, tmp_path):
    from catcap.config import ConfigError

    with pytest.raises(ConfigError, match="train.precision: expected one of 'fp32', 'bf16', 'fp16', found 'fp8'"):
        load_experiment(None, tiny_args(dist_world, tmp_path / "x", **{"train.precision": "fp8"}))
    with pytest.raises(ConfigError, match="accumulate must be >= 1"):
        load_experiment(None, tiny_args(dist_world, tmp_path / "x", **{"train.accumulate": 0}))
