"""fp16's loss scaler on a CPU (torch.amp.GradScaler runs there too): a step whose gradients are
not finite is skipped and the scale halves; when every step is skipped, training stops with an
error that names the precisions that would work instead of going on without learning."""

import pytest
import torch

from catcap.config import ConfigError
from catcap.training.precision import MAX_SKIPPED_IN_A_ROW, Precision


def step(amp, weight, optimizer, factor):
    loss = (weight * factor).sum()
    amp.backward(loss)
    amp.step(optimizer, [weight], grad_clip=1.0)
    optimizer.zero_grad()


def test_finite_gradients_are_applied_and_counted_as_such():
    amp, weight = Precision("fp16", torch.device("cpu")), torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    step(amp, weight, optimizer, 1.0)
    assert amp.skipped_in_a_row == 0 and not torch.equal(weight.detach(), torch.ones(3))


def test_one_overflow_is_skipped_and_the_next_good_step_resets_the_count():
    amp, weight = Precision("fp16", torch.device("cpu")), torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scale = amp.scaler.get_scale()
    step(amp, weight, optimizer, float("inf"))
    assert amp.skipped_in_a_row == 1 and amp.scaler.get_scale() == scale / 2
    assert torch.equal(weight.detach(), torch.ones(3)), "the overflowed step was applied"
    step(amp, weight, optimizer, 1.0)
    assert amp.skipped_in_a_row == 0


def test_every_step_skipped_stops_training_with_what_to_do():
    amp, weight = Precision("fp16", torch.device("cpu")), torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for _ in range(MAX_SKIPPED_IN_A_ROW - 1):
        step(amp, weight, optimizer, float("nan"))
    with pytest.raises(ConfigError, match=r"last 24 training steps were all skipped.*--precision bf16.*--precision fp32"):
        step(amp, weight, optimizer, float("nan"))


def test_bf16_and_fp32_have_no_scaler_and_count_nothing():
    for name in ("fp32", "bf16"):
        amp, weight = Precision(name, torch.device("cpu")), torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.SGD([weight], lr=0.1)
        step(amp, weight, optimizer, 1.0)
        assert amp.skipped_in_a_row == 0
