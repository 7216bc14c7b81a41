import math

import pytest
import torch

from catcap.training.losses import cross_entropy
from catcap.training.schedule import ScheduleConfig, learning_rate


def test_cross_entropy_ignores_padding_and_matches_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]]]))
    targets = torch.tensor([[0, 2, 1]])
    mask = torch.tensor([[True, True, False]])
    expected = -(math.log(0.5) + math.log(0.8)) / 2
    assert cross_entropy(logits, targets, mask).item() == pytest.approx(expected, rel=1e-6)
    # label smoothing eps: (1 - eps) * nll + eps * mean over words of -log p
    eps = 0.1
    smooth = sum((1 - eps) * -math.log(p[t]) + eps * sum(-math.log(q) for q in p) / 3
                 for p, t in [((0.5, 0.25, 0.25), 0), ((0.1, 0.1, 0.8), 2)]) / 2
    assert cross_entropy(logits, targets, mask, eps).item() == pytest.approx(smooth, rel=1e-6)


def test_noam_peaks_at_warmup():
    cfg = ScheduleConfig(name="noam", warmup=100)
    lrs = [learning_rate(cfg, s, 0, 512) for s in range(1, 400)]
    assert max(range(len(lrs)), key=lrs.__getitem__) == 99
    assert lrs[99] == pytest.approx(512 ** -0.5 * 100 ** -0.5)


def test_step_and_constant():
    cfg = ScheduleConfig(name="step", lr=2e-4, gamma=0.8, every=3)
    assert [learning_rate(cfg, 1, e, 512) for e in (0, 2, 3, 6)] == pytest.approx([2e-4, 2e-4, 1.6e-4, 1.28e-4])
    assert learning_rate(ScheduleConfig(name="constant", lr=5e-6), 10, 9, 512) == 5e-6


@pytest.mark.parametrize("mode, expected", [
    ("value", [[0.1, -0.1], [0.05, 0.1]]),  # every element clamped to [-0.1, 0.1]
    ("norm", [[0.6 * 0.1 / 1.01 ** 0.5, -0.8 * 0.1 / 1.01 ** 0.5], [0.1 * 0.1 / 1.01 ** 0.5, 0.0]]),  # norm sqrt(1.01) -> 0.1
])
def test_gradient_clipping_by_value_or_by_norm(mode, expected):
    """Adam-free check of the clip itself: SGD with lr 1 moves each weight by its clipped gradient."""
    from catcap.training.precision import Precision

    w = torch.nn.Parameter(torch.zeros(2, 2))
    w.grad = torch.tensor([[0.6, -0.8], [0.05, 0.3]]) if mode == "value" else torch.tensor([[0.6, -0.8], [0.1, 0.0]])
    optimizer = torch.optim.SGD([w], lr=1.0)
    Precision("fp32", torch.device("cpu")).step(optimizer, [w], 0.1, mode)
    torch.testing.assert_close(-w.detach(), torch.tensor(expected))
