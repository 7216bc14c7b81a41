"""The training loop's rules that decide what happens between epochs and inside a step:
SCST's early stop (``train.scst.patience``), the XE -> SCST switch (``xe_then_scst``: the best
XE weights, a fresh Adam at the SCST rate) and gradient clipping (``train.grad_clip``).

Oracles: validation is scripted (``scripted_validation``: a fixed CIDEr-D per epoch, and a copy
of the weights each validation saw), so the epoch at which a rule must fire is known by hand;
for clipping, the gradients of the same step with clipping off (same seed, no dropout), clipped
by the textbook rule (g * c / ||g|| when ||g|| > c; each element clamped to [-c, c])."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from catcap.api import load_experiment
from catcap.data.collate import collate_captions
from catcap.data.synthetic import make_world
from catcap.training import loop
from catcap.training.checkpoint import load_checkpoint
from catcap.training.loop import Trainer
from tiny_runs import tiny_run_overrides


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A very small built-in world: 12 training images (60 captions), 4 validation images."""
    return make_world(tmp_path_factory.mktemp("loop_world") / "shapes", num_train=12, num_val=4, num_test=2, seed=5,
                      feature_dim=16, progress=False)


def config(world, out_dir, **extra):
    items = {"model.feature_dim": 16, "model.d_model": 16, "model.d_ff": 32, "train.batch_size": 12,
             "train.scst.num_samples": 2, "train.scst.max_len": 6, "train.val_max_len": 6, **extra}
    return load_experiment(None, tiny_run_overrides(world, out_dir, **items))


def scripted_validation(monkeypatch, ciders: list[float]) -> list[dict]:
    """Replace the trainer's validation: epoch i scores ``ciders[i]``; returns the list that
    receives a copy of the weights each validation saw."""
    seen, scores = [], iter(ciders)

    def validate(model, *args, **kwargs):
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        return SimpleNamespace(corpus={"CIDEr": next(scores)}), []

    monkeypatch.setattr(loop, "validate", validate)
    return seen


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("ciders, stop_epoch, best_epoch", [
    ([0.5, 0.4, 0.3, 0.9, 0.9], 3, 1),       # epochs 2 and 3 are no better than epoch 1: stop after 3
    ([0.5, 0.4, 0.6, 0.5, 0.5, 0.9], 5, 3),  # epoch 3 improves: the count starts again, stop after 5
])
def test_scst_stops_after_patience_epochs_without_a_better_validation(world, tmp_path, monkeypatch, ciders,
                                                                      stop_epoch, best_epoch):
    seen = scripted_validation(monkeypatch, ciders)
    logs = []
    cfg = config(world, tmp_path / "run", **{"train.objective": "scst", "train.scst.patience": 2, "train.epochs": 10})
    pos = Trainer(cfg, log=logs.append).fit()
    assert pos.stopped and pos.epoch == stop_epoch and len(seen) == stop_epoch
    assert (pos.best_epoch, pos.best_cider) == (best_epoch, ciders[best_epoch - 1])
    assert "[catcap] SCST validation CIDEr-D has not improved for 2 epochs: stopping" in logs
    assert same_weights(load_checkpoint(tmp_path / "run" / "best")["weights"], seen[best_epoch - 1])
    assert not same_weights(seen[best_epoch - 1], seen[-1])  # training went on after the best epoch


def test_xe_never_stops_early(world, tmp_path, monkeypatch):
    """patience is SCST's rule: an XE run with stalling validation runs all its epochs."""
    seen = scripted_validation(monkeypatch, [0.5, 0.4, 0.3, 0.2])
    cfg = config(world, tmp_path / "run", **{"train.scst.patience": 1, "train.epochs": 4})
    pos = Trainer(cfg, log=lambda m: None).fit()
    assert not pos.stopped and pos.epoch == 4 and len(seen) == 4 and pos.phase == "xe"


def test_the_switch_to_scst_reloads_the_best_xe_weights_and_starts_a_fresh_adam(world, tmp_path, monkeypatch):
    """XE epoch 1 scores 0.5, epoch 2 only 0.3: with switch_patience 1 the run switches after
    epoch 2, from epoch 1's weights (not epoch 2's, the last ones), with an Adam that has no
    moments yet and SCST's fixed rate."""
    seen = scripted_validation(monkeypatch, [0.5, 0.3])
    logs = []
    cfg = config(world, tmp_path / "run", **{"train.objective": "xe_then_scst", "train.scst.switch_patience": 1,
                                             "train.scst.lr": 3e-5, "train.epochs": 2})
    trainer = Trainer(cfg, log=logs.append)
    xe_adam = trainer.optimizer
    pos = trainer.fit()
    assert pos.phase == "scst" and pos.best_epoch == 1 and len(seen) == 2
    assert not same_weights(seen[0], seen[1])  # the last XE epoch's weights differ from the best's
    assert same_weights(trainer.model.state_dict(), seen[0])
    assert same_weights(load_checkpoint(tmp_path / "run" / "last")["weights"], seen[0])
    assert trainer.optimizer is not xe_adam and len(xe_adam.state) > 0
    assert len(trainer.optimizer.state) == 0  # no moments carried over from XE
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [3e-5]
    assert any("switching to SCST from the best XE weights (epoch 1, CIDEr-D 0.500)" in m for m in logs)


def step_gradients(world, out_dir, **clip) -> tuple[list[torch.Tensor], float]:
    """The gradients the optimizer steps with on the run's first batch, and their global norm
    before clipping (dropout off: the same step twice gives the same raw gradients)."""
    cfg = config(world, out_dir, **{"model.dropout": 0.0, **clip})
    trainer = Trainer(cfg, log=lambda m: None)
    batch = collate_captions([trainer.data.train[i] for i in range(12)])
    seen, step = [], trainer.optimizer.step

    def recording_step(*args, **kwargs):
        seen.append([p.grad.detach().clone() for p in trainer._parameters()])
        return step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    trainer.train_step(batch)
    (grads,) = seen
    return grads, float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def test_gradient_clipping_by_norm_is_on_by_default_and_bounds_the_step(world, tmp_path):
    assert config(world, tmp_path).train.grad_clip == 1.0 and config(world, tmp_path).train.grad_clip_mode == "norm"
    raw, raw_norm = step_gradients(world, tmp_path / "off", **{"train.grad_clip": 0.0})
    clipped, clipped_norm = step_gradients(world, tmp_path / "on")  # the default: norm 1.0
    assert raw_norm > 1.0, "the test needs a step whose gradient is larger than the bound"
    assert clipped_norm == pytest.approx(1.0, rel=1e-5)
    for r, c in zip(raw, clipped):
        torch.testing.assert_close(c, r / raw_norm, rtol=1e-5, atol=1e-8)  # same direction, norm 1


def test_a_gradient_inside_the_bound_is_left_alone(world, tmp_path):
    raw, raw_norm = step_gradients(world, tmp_path / "off", **{"train.grad_clip": 0.0})
    bound = 2 * raw_norm
    kept, kept_norm = step_gradients(world, tmp_path / "on", **{"train.grad_clip": bound})
    assert kept_norm == pytest.approx(raw_norm, rel=1e-6)
    assert all(torch.equal(r, k) for r, k in zip(raw, kept))


def test_gradient_clipping_by_value_clamps_every_element(world, tmp_path):
    raw, _ = step_gradients(world, tmp_path / "off", **{"train.grad_clip": 0.0})
    largest = max(float(g.abs().max()) for g in raw)
    bound = largest / 4  # some elements are above it
    clamped, _ = step_gradients(world, tmp_path / "on", **{"train.grad_clip": bound, "train.grad_clip_mode": "value"})
    assert any(bool((g.abs() > bound).any()) for g in raw)
    for r, c in zip(raw, clamped):
        torch.testing.assert_close(c, r.clamp(-bound, bound), rtol=0, atol=0)
