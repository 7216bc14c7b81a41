"""Adaptive weight constraint (AWC), SPEC.md §3: keep the attention each (Light)CACA head puts
on its history near a (learnable) target.

For decoder layer n and head h, with ``a_t`` the total final-pass attention weight on history
entries at step t of a caption of l real positions:

    L_awc^{n,h} = (1/l) sum_t (a_t - beta^{n,h} + eps)^2,        eps = 1e-8
    L_AWC       = gamma / (N_layers * H) * sum_{n,h} L_awc^{n,h},  gamma = 0.5

averaged over the captions of the batch (each caption weighs the same, as the per-caption
formula says). ``beta`` is one learnable scalar per layer and head (``mode="adaptive"``,
initialised to ``beta``) or a constant (``mode="fixed"``). In a meshed (M2) decoder every
decoder layer attends to L encoder levels, each with its own history weight per head, so H
counts level-heads (L x heads, ``catcap.models.parts.history_heads``): every (Light)CACA call
gets its constraint. Legend: B captions, L layers, H heads, T positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn


@dataclass
class AWCConfig:
    """``train.awc``: enabled adds L_AWC to the XE loss (needs a caca / light_caca model);
    mode ``adaptive`` learns beta per layer and head starting at ``beta``, ``fixed`` keeps
    ``beta`` (the paper tried 0.1-0.9); gamma weighs the term; eps as in the paper."""

    enabled: bool = False
    mode: Literal["adaptive", "fixed"] = "adaptive"
    beta: float = 0.5
    gamma: float = 0.5
    eps: float = 1e-8

    def __post_init__(self):
        from catcap.config import check_at_least

        check_at_least("train.awc", self, {"beta": 0.0, "gamma": 0.0, "eps": 0.0})


def stack_history_weights(extras: list[dict]) -> Tensor:
    """Per-layer decoder extras -> a (B, L, H, T) tensor of history weights ``a_t``."""
    if not extras or any("history_weight" not in e for e in extras):
        raise ValueError("the AWC loss needs history weights from every decoder layer; use "
                         "model.cross_attention=caca or light_caca, or set train.awc.enabled=false")
    return torch.stack([e["history_weight"] for e in extras], dim=1)


def awc_loss(history_weight: Tensor, beta: Tensor, mask: Tensor, gamma: float = 0.5, eps: float = 1e-8) -> Tensor:
    """history_weight (B, L, H, T), beta (L, H), mask (B, T) True = real position -> scalar L_AWC."""
    mask = mask.to(history_weight.dtype)
    squared = (history_weight - beta[None, :, :, None] + eps) ** 2  # (B, L, H, T)
    per_head = (squared * mask[:, None, None, :]).sum(-1) / mask.sum(-1).clamp(min=1.0)[:, None, None]
    return gamma * per_head.mean(dim=(1, 2)).mean()


class AdaptiveWeightConstraint(nn.Module):
    """L_AWC with its betas: (L, H) parameters (adaptive) or a buffer (fixed)."""

    def __init__(self, num_layers: int, num_heads: int, mode: str = "adaptive", beta: float = 0.5,
                 gamma: float = 0.5, eps: float = 1e-8):
        super().__init__()
        if mode not in ("adaptive", "fixed"):
            raise ValueError(f"AWC mode must be 'adaptive' or 'fixed', got {mode!r}")
        init = torch.full((num_layers, num_heads), float(beta))
        if mode == "adaptive":
            self.beta = nn.Parameter(init)
        else:
            self.register_buffer("beta", init)
        self.mode, self.gamma, self.eps = mode, gamma, eps

    def forward(self, extras: list[dict], mask: Tensor) -> Tensor:
        """Decoder extras per layer and the (B, T) query-position mask -> L_AWC (scalar)."""
        return awc_loss(stack_history_weights(extras), self.beta, mask, self.gamma, self.eps)


def make_awc(cfg) -> AdaptiveWeightConstraint | None:
    """The AWC term of an experiment config (None when ``train.awc.enabled`` is false)."""
    awc = cfg.train.awc
    if not awc.enabled:
        return None
    from catcap.models.parts import history_heads, history_layers

    return AdaptiveWeightConstraint(history_layers(cfg.model), history_heads(cfg.model), awc.mode, awc.beta, awc.gamma,
                                    awc.eps)


def history_stats(extras: list[dict], mask: Tensor) -> dict:
    """For the training log: ``{"history_weight": [mean a_t of layer 1, ..]}`` over real
    positions and heads; {} for a model without a history memory."""
    if not extras or any(e.get("history_weight") is None for e in extras):
        return {}
    with torch.no_grad():
        a = stack_history_weights(extras)  # (B, L, H, T)
        m = mask.to(a.dtype)[:, None, None, :]
        per_layer = (a * m).sum(dim=(0, 2, 3)) / (m.sum() * a.shape[2]).clamp(min=1.0)
    return {"history_weight": [round(float(x), 5) for x in per_layer]}
