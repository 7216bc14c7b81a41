"""Scheduled sampling (Bengio et al. 2015) for XE training, as the anchors' LSTM captioners use it.

At every step after ``<bos>`` each caption's input token is, with probability p, replaced by
a token drawn from the model's own prediction at the previous step (detached: no gradient
flows through the choice), so that training sees some of the mistakes decoding will make.
p grows with the epoch (``train.scheduled_sampling``; the anchors: +0.05 every 5 epochs up to
0.25):

    p(epoch) = min(increase * floor((epoch - start) / every), max_prob)   for epoch >= start, else 0

``mode``: ``sample`` draws from softmax(logits) (the anchors), ``greedy`` takes the argmax. The
pass runs through the cached decoding step of any decoder (``decoder.step``), one token at a
time; p = 0 is the plain teacher-forced forward, which the trainer uses instead. At p = 1 it is
free-running decoding for the length of the reference. Draws use the global torch generator
(restored on resume) unless one is given. Legend: B captions, T caption positions, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn


@dataclass
class ScheduledSamplingConfig:
    """``train.scheduled_sampling``: off unless ``enabled``; p(epoch) as the module doc says
    (``start`` a 0-based epoch); ``mode`` sample | greedy."""

    enabled: bool = False
    start: int = 0
    every: int = 5
    increase: float = 0.05
    max_prob: float = 0.25
    mode: Literal["sample", "greedy"] = "sample"

    def __post_init__(self):
        from catcap.config import ConfigError, check_at_least

        check_at_least("train.scheduled_sampling", self, {"start": 0, "every": 1, "increase": 0.0, "max_prob": 0.0})
        if self.max_prob > 1:
            raise ConfigError(f"train.scheduled_sampling.max_prob is a probability, found {self.max_prob!r}; use a value in [0, 1]")


def sampling_probability(cfg: ScheduledSamplingConfig, epoch: int) -> float:
    """p for 0-based ``epoch`` (0 when scheduled sampling is off)."""
    if not cfg.enabled or epoch < cfg.start:
        return 0.0
    return min(cfg.increase * ((epoch - cfg.start) // cfg.every), cfg.max_prob)


def scheduled_forward(model: nn.Module, features: Tensor, feature_mask: Tensor, captions: Tensor, prob: float,
                      mode: str = "sample", generator: torch.Generator | None = None):
    """Captions (B, T) ``<bos> w_1 .. <eos> <pad>..`` -> logits (B, T-1, V) predicting
    positions 1..T-1, the decoder's extras (per layer, ``history_weight`` over the T-1 steps),
    and the tokens read (B, T-1): input t is ``captions[:, t]`` or, with probability ``prob``
    (t >= 1), the model's own choice from step t-1."""
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, 1)
    steps, read, weights = [], [], []
    for t in range(captions.shape[1] - 1):
        tokens = captions[:, t]
        if t > 0 and prob > 0:
            tokens = _mixed(tokens, steps[-1].detach(), prob, mode, generator)
        logits, state, extras = model.decoder.step(tokens, state)
        steps.append(logits)
        read.append(tokens)
        weights.append([e.get("history_weight") for e in extras])
    return torch.stack(steps, 1), _history_extras(weights), torch.stack(read, 1)


def _mixed(gold: Tensor, logits: Tensor, prob: float, mode: str, generator) -> Tensor:
    """gold (B,) with each entry replaced by the model's choice from ``logits`` (B, V) with
    probability ``prob``."""
    chosen = torch.rand(gold.shape, generator=generator, device=gold.device) < prob
    if not bool(chosen.any()):
        return gold
    if mode == "greedy":
        own = logits.argmax(-1)
    elif mode == "sample":
        own = torch.multinomial(logits.float().softmax(-1), 1, generator=generator)[:, 0]
    else:
        raise ValueError(f"scheduled sampling mode must be 'sample' or 'greedy', got {mode!r}")
    return torch.where(chosen, own, gold)


def _history_extras(weights: list[list]) -> list[dict]:
    """Per step, per layer history weights (R, H, 1) -> per layer {"history_weight": (R, H, T)}
    (the AWC loss's input); {} per layer for models without history."""
    layers = len(weights[0]) if weights else 0
    return [{} if weights[0][n] is None else {"history_weight": torch.cat([w[n] for w in weights], -1)}
            for n in range(layers)]
