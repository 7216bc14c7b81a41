"""Mixed precision: ``train.precision`` fp32 | bf16 | fp16 (``--precision``).

- ``fp32``: nothing changes.
- ``bf16``: forward passes under ``torch.autocast(dtype=bfloat16)`` (matrix products in bf16,
  softmax/LayerNorm/losses kept in fp32 by autocast); weights, gradients and Adam stay fp32.
  Same exponent range as fp32, so no loss scaling. CUDA (Ampere or newer) and CPU.
- ``fp16``: autocast with float16 plus a gradient scaler (``torch.amp.GradScaler``): the loss
  is multiplied before ``backward`` so small gradients do not flush to zero, gradients are
  unscaled before clipping, and a step whose gradients overflowed is skipped (the scale then
  halves). The scaler's state is saved in checkpoints. Meant for GPUs. When
  :data:`MAX_SKIPPED_IN_A_ROW` steps in a row are skipped the gradients are not finite at any
  scale (fp16's range, at most 65504, is too small for the model's activations), and training
  stops with an error that says to use bf16 or fp32, rather than going on without learning.

Decoding (validation, ``catcap evaluate``) uses the same autocast; ``docs/distributed.md`` says
how far its captions agree with fp32.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from catcap.config import ConfigError

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
#: fp16 steps skipped in a row (the scale down by 2^24, from 65536 to 2^-8) before training stops
MAX_SKIPPED_IN_A_ROW = 24


class Precision:
    """Autocast and (fp16) loss scaling for one device."""

    def __init__(self, name: str, device: torch.device):
        if name not in DTYPES:
            raise ConfigError(f"unknown precision {name!r}: expected fp32, bf16 or fp16 (e.g. --precision bf16)")
        if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError("this GPU has no bfloat16 support: use --precision fp16 (with loss scaling) or fp32")
        self.name, self.device, self.dtype = name, device, DTYPES[name]
        self.scaler = torch.amp.GradScaler(device.type, enabled=name == "fp16")
        self.skipped_in_a_row = 0
        self.last_scale = self.scaler.get_scale() if self.scaler.is_enabled() else None  # the scale the next step runs at

    def autocast(self, cache: bool = True):
        """The context a forward pass runs in. ``cache=False`` for a pass recorded as a CUDA graph:
        a cached cast would be a tensor made during the capture and reused outside it."""
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer, params, grad_clip: float, mode: str = "norm") -> None:
        """Unscale (fp16), clip, step (skipped by the scaler when gradients overflowed), update.
        ``mode`` ``norm``: the global gradient norm is scaled down to ``grad_clip``; ``value``:
        every gradient element is clamped to [-grad_clip, grad_clip] (the LSTM anchors' rule,
        e.g. AoANet's 0.1)."""
        self.scaler.unscale_(optimizer)
        if grad_clip > 0 and mode == "value":
            torch.nn.utils.clip_grad_value_(params, grad_clip)
        elif grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.is_enabled():
            self._count_skipped()

    def _count_skipped(self) -> None:
        """A step is skipped exactly when the scaler lowers its scale; too many in a row stop training."""
        scale, before = self.scaler.get_scale(), self.last_scale
        self.last_scale = scale
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if scale < before else 0
        if self.skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW:
            raise ConfigError(
                f"fp16: the last {self.skipped_in_a_row} training steps were all skipped: the gradients were not "
                f"finite even with the loss scale cut to {scale:g}, so fp16's range (at most 65504) "
                f"is too small for this model's activations or gradients. Train with --precision bf16 (fp32's range, "
                f"on Ampere or newer GPUs) or --precision fp32.")

    def state_dict(self) -> dict:
        return self.scaler.state_dict() if self.scaler.is_enabled() else {}

    def load_state_dict(self, state: dict) -> None:
        if state and self.scaler.is_enabled():
            self.scaler.load_state_dict(state)
            self.last_scale = self.scaler.get_scale()
