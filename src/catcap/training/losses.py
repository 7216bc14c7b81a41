"""Training losses. Legend: B batch, T caption positions, V vocabulary."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def cross_entropy(logits: Tensor, targets: Tensor, mask: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean token-level cross entropy over real target positions.

    logits (B, T, V); targets (B, T) token ids; mask (B, T) True = real target (words and
    ``<eos>``, not ``<pad>``). With ``label_smoothing`` eps the target distribution puts
    ``1 - eps`` on the true word and ``eps / V`` on every word (PyTorch's definition).
    """
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           reduction="none", label_smoothing=label_smoothing)
    mask = mask.reshape(-1).to(flat.dtype)
    return (flat * mask).sum() / mask.sum().clamp(min=1.0)
