"""Learning-rate schedules as multipliers of the optimizer's base learning rate.

- ``noam`` (Vaswani et al.): ``lr = factor * D^-0.5 * min(s^-0.5, s * warmup^-1.5)`` at step s
  (1-based); the optimizer's base lr is set to 1 and the schedule gives the whole value.
- ``step``: ``lr = base * gamma^floor(epoch / every)`` (decay every few epochs, e.g. AoANet's
  x0.8 every 3 epochs), applied per optimizer step from the epoch it is in.
- ``constant``: ``lr = base`` (e.g. SCST's fixed 5e-6).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass
class ScheduleConfig:
    """``train.schedule`` section."""

    name: Literal["noam", "step", "constant"] = "noam"
    warmup: int = 10000
    factor: float = 1.0
    lr: float = 5e-4
    gamma: float = 0.8
    every: int = 3

    def __post_init__(self):
        from catcap.config import check_at_least

        check_at_least("train.schedule", self, {"warmup": 1, "factor": 0.0, "lr": 0.0, "gamma": 0.0, "every": 1})


def learning_rate(cfg: ScheduleConfig, step: int, epoch: int, d_model: int) -> float:
    """Learning rate for optimizer step ``step`` (1-based) in epoch ``epoch`` (0-based)."""
    if cfg.name == "noam":
        s = max(step, 1)
        return cfg.factor * d_model ** -0.5 * min(s ** -0.5, s * cfg.warmup ** -1.5)
    if cfg.name == "step":
        return cfg.lr * cfg.gamma ** (epoch // cfg.every)
    return cfg.lr


def set_learning_rate(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
