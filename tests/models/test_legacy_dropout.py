"""The PyTorch 1.x + MKL dropout: the draw, the MCG31m1 stream, the mask, the switch."""

import numpy as np
import pytest
import torch
from torch import nn

from catcap.models.legacy_dropout import (
    MCG31_A, MCG31_M, SwitchableDropout, draw_seed, legacy_dropout, legacy_dropout_enabled,
    legacy_dropout_mode, legacy_keep_mask, mcg31_uniforms, set_legacy_dropout)


def mt19937_outputs(seed, n):
    """Raw 32-bit outputs of mt19937 seeded like torch.manual_seed (init_genrand)."""
    return [int(v) for v in np.random.RandomState(seed).randint(0, 2**32, size=n, dtype=np.uint64)]


def mcg_reference(seed, n):
    x = seed % MCG31_M or 1
    out = []
    for _ in range(n):
        out.append(x / MCG31_M)
        x = x * MCG31_A % MCG31_M
    return out


@pytest.mark.parametrize("seed", [0, 231, 4_000_000_000])
def test_draw_seed_is_the_next_raw_mt19937_output(seed):
    torch.manual_seed(seed)
    draws = [draw_seed() for _ in range(200)]
    assert draws == mt19937_outputs(seed, 200)
    assert any(d >= 2**31 for d in draws) and any(d < 2**31 for d in draws)  # both top bits seen


def test_draw_seed_advances_the_generator_by_one_draw():
    torch.manual_seed(7)
    draw_seed()
    after = torch.empty(3).uniform_()                     # one 32-bit draw per float element
    torch.manual_seed(7)
    torch.empty(1).uniform_()
    assert torch.equal(after, torch.empty(3).uniform_())


@pytest.mark.parametrize("seed", [1, 12345, 2**31 - 2, 2**31 - 1, 2**31, 2**32 - 1, 0])
def test_mcg31_stream_starts_at_the_seed(seed):
    got = mcg31_uniforms(seed, 50).tolist()
    assert got == mcg_reference(seed, 50)
    assert got[0] == (seed % MCG31_M or 1) / MCG31_M


def test_mcg31_long_streams_use_the_doubling_table():
    got = mcg31_uniforms(987654321, 5000)
    assert got.dtype == torch.float64 and got.shape == (5000,)
    assert got[4999].item() == mcg_reference(987654321, 5000)[-1]
    assert 0.0 < got.min().item() and got.max().item() < 1.0


def test_keep_mask_is_row_major_and_thresholded():
    u = torch.tensor(mcg_reference(99, 12)).reshape(3, 4)
    assert torch.equal(legacy_keep_mask(torch.Size([3, 4]), 0.7, 99), u < 0.7)


def test_legacy_dropout_values_and_one_draw_per_call():
    x = torch.arange(1.0, 25.0).reshape(2, 3, 4)
    torch.manual_seed(5)
    out = legacy_dropout(x, p=0.25)
    seed = mt19937_outputs(5, 1)[0]
    keep = torch.tensor(mcg_reference(seed, 24)).reshape(2, 3, 4) < 0.75
    assert torch.equal(out, x * keep.float().div_(0.75))
    assert 0 < int(keep.sum()) < 24
    assert draw_seed() == mt19937_outputs(5, 2)[1]


def test_non_contiguous_input_uses_logical_order():
    x = torch.randn(4, 6)
    torch.manual_seed(11)
    out_t = legacy_dropout(x.t(), p=0.5)                  # (6, 4) view with transposed strides
    torch.manual_seed(11)
    out_c = legacy_dropout(x.t().contiguous(), p=0.5)
    assert torch.equal(out_t, out_c)


def test_no_draw_when_dropout_is_off_and_zeros_at_p1():
    x = torch.randn(3, 3)
    torch.manual_seed(3)
    assert legacy_dropout(x, p=0.0) is x
    assert legacy_dropout(x, p=0.5, training=False) is x
    assert legacy_dropout(torch.empty(0, 3), p=0.5).numel() == 0
    assert torch.equal(legacy_dropout(x, p=1.0), torch.zeros(3, 3))
    assert draw_seed() == mt19937_outputs(3, 1)[0]         # nothing above drew
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        legacy_dropout(x, p=1.5)


def test_gradient_flows_through_the_kept_elements():
    x = torch.randn(5, 7, requires_grad=True)
    torch.manual_seed(2)
    legacy_dropout(x, p=0.3).sum().backward()
    torch.manual_seed(2)
    keep = legacy_keep_mask(torch.Size([5, 7]), 0.7, draw_seed())
    assert torch.allclose(x.grad, keep.float() / 0.7)


def test_switch_selects_the_algorithm_and_nn_dropout_never_changes():
    x = torch.randn(8, 16)
    drop, plain = SwitchableDropout(0.4), nn.Dropout(0.4)
    with legacy_dropout_mode(True):
        assert legacy_dropout_enabled()
        torch.manual_seed(1)
        on = drop(x)
        torch.manual_seed(1)
        plain_on = plain(x)
    with legacy_dropout_mode(False):
        torch.manual_seed(1)
        off = drop(x)
        torch.manual_seed(1)
        plain_off = plain(x)
    torch.manual_seed(1)
    assert torch.equal(on, legacy_dropout(x, 0.4))
    assert torch.equal(off, plain_off) and torch.equal(plain_on, plain_off)
    assert not torch.equal(on, off)


def test_switch_restores_and_validates():
    before = legacy_dropout_enabled()
    with legacy_dropout_mode(not before):
        assert legacy_dropout_enabled() is (not before)
    assert legacy_dropout_enabled() is before
    with pytest.raises(TypeError, match="True or False"):
        set_legacy_dropout("yes")
    drop = SwitchableDropout(0.5).eval()
    x = torch.randn(4)
    with legacy_dropout_mode(True):
        assert torch.equal(drop(x), x)
