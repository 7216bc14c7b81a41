"""The dropout of PyTorch 1.x with MKL on Intel CPUs, reproduced with today's torch.

Why: published teaching material (the ``mml`` notebook, see ``docs/teaching.md``) prints
expected outputs of layers run in train mode under a fixed seed. Those numbers came from
PyTorch 1.x built with MKL on an Intel CPU, where ``bernoulli_(p)`` (and so dropout) did not
draw one random number per element. Instead, per call:

1. ONE 32-bit number ``s`` was drawn from torch's default CPU generator (mt19937);
2. ``s`` seeded an MKL ``VSL_BRNG_MCG31`` stream: ``x_0 = s mod (2^31 - 1)`` (0 becomes 1),
   ``x_{k+1} = 1132489760 * x_k mod (2^31 - 1)``, uniforms ``u_k = x_k / (2^31 - 1)``;
   so the first uniform is the seed itself, not one step after it;
3. element ``k`` of the input, in row-major (logical) order, was kept when ``u_k < 1 - p``;
4. the output was ``x * (keep / (1 - p))``, the mask scaled in the input's dtype.

Today's CPU dropout draws per element, so the same seed gives other masks. Those facts were
established by matching the notebook's printed numbers (tests/models/test_legacy_dropout.py
and tests/mml/).

The switch: :class:`SwitchableDropout` is an ``nn.Dropout`` that uses this algorithm while
the process-wide switch is on (:func:`set_legacy_dropout`, or the context manager
:func:`legacy_dropout_mode`); otherwise it is exactly ``nn.Dropout``. The switch is off by
default and catcap's own models use plain ``nn.Dropout``, so they never change; the ``mml``
teaching package builds its layers from :class:`SwitchableDropout` and turns the switch on
when imported. The switch is a plain module global (not per thread).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["MCG31_A", "MCG31_M", "SwitchableDropout", "draw_seed", "legacy_dropout",
           "legacy_dropout_enabled", "legacy_dropout_mode", "legacy_keep_mask", "mcg31_uniforms",
           "set_legacy_dropout"]

MCG31_A = 1132489760          # multiplier of MKL's MCG31m1 generator
MCG31_M = 2**31 - 1           # its modulus (a Mersenne prime)

_enabled = False
_powers = torch.ones(1, dtype=torch.int64)   # cache: _powers[k] = A^k mod M


# ------------------------------------------------------------------------------ the switch

def legacy_dropout_enabled() -> bool:
    """Whether :class:`SwitchableDropout` modules currently use the legacy algorithm."""
    return _enabled


def set_legacy_dropout(enabled: bool) -> bool:
    """Turn the legacy dropout of :class:`SwitchableDropout` on or off; returns the old value."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_legacy_dropout expects True or False, found {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


@contextlib.contextmanager
def legacy_dropout_mode(enabled: bool = True) -> Iterator[None]:
    """``with legacy_dropout_mode(False): ...`` sets the switch for a block, then restores it."""
    previous = set_legacy_dropout(enabled)
    try:
        yield
    finally:
        set_legacy_dropout(previous)


# ----------------------------------------------------------------------- the random numbers

def draw_seed() -> int:
    """The next 32-bit output of torch's default CPU generator; advances it by exactly one draw.

    No single torch 2.x op returns a raw 32-bit draw: ``random_()`` on int32 gives
    ``draw mod 2^31`` and ``randint(0, k)`` with k >= 2^31 takes two draws. So the draw is
    read twice: ``draw mod 2^31`` from the default generator (advancing it by one) and
    ``draw mod 3`` from a copy of its state; since ``2^31 = 2 (mod 3)``, the residue mod 3
    says whether the top bit was set.
    """
    twin = torch.Generator()
    twin.set_state(torch.default_generator.get_state())
    low31 = int(torch.empty((), dtype=torch.int32).random_().item())
    mod3 = int(torch.randint(0, 3, (), generator=twin).item())
    top = 0 if low31 % 3 == mod3 else 1
    return low31 + (top << 31)


def _mcg_powers(n: int) -> Tensor:
    """(n,) int64: ``A^k mod M`` for k = 0..n-1 (cached, grown by doubling)."""
    global _powers
    while _powers.numel() < n:
        step = pow(MCG31_A, _powers.numel(), MCG31_M)
        _powers = torch.cat([_powers, _powers * step % MCG31_M])
    return _powers[:n]


def mcg31_uniforms(seed: int, n: int) -> Tensor:
    """(n,) float64: the first n uniforms of an MKL MCG31m1 stream seeded with ``seed``.

    ``u_k = x_k / M`` with ``x_0 = seed mod M`` (0 -> 1) and ``x_k = A^k x_0 mod M``; every
    product stays below 2^62, so int64 arithmetic is exact.
    """
    if n < 0:
        raise ValueError(f"expected a non-negative count of uniforms, found {n}")
    x0 = int(seed) % MCG31_M or 1
    return (_mcg_powers(n) * x0 % MCG31_M).to(torch.float64) / MCG31_M


def legacy_keep_mask(shape: torch.Size, keep_prob: float, seed: int) -> Tensor:
    """Bool mask of ``shape``: element k (row-major) is kept when ``u_k < keep_prob``."""
    n = 1
    for size in shape:
        n *= int(size)
    return (mcg31_uniforms(seed, n) < keep_prob).reshape(shape)


# ----------------------------------------------------------------------------- the dropout

def legacy_dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Dropout as PyTorch 1.x + MKL computed it (see the module docstring); any shape.

    Like 1.x: no draw when ``p == 0``, ``not training`` or ``x`` is empty; zeros when p == 1.
    The mask is built on the CPU and moved to ``x``'s device.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], found {p}")
    if p == 0.0 or not training or x.numel() == 0:
        return x
    if p == 1.0:
        return x * torch.zeros((), dtype=x.dtype, device=x.device)
    keep = legacy_keep_mask(x.shape, 1.0 - p, draw_seed())
    noise = keep.to(device=x.device, dtype=x.dtype).div_(1.0 - p)
    return x * noise


class SwitchableDropout(nn.Dropout):
    """``nn.Dropout`` that uses :func:`legacy_dropout` while the switch is on.

    Same constructor, same state dict (none), same attribute names as ``nn.Dropout``.
    """

    def forward(self, x: Tensor) -> Tensor:
        if not _enabled:
            return F.dropout(x, self.p, self.training, self.inplace)
        out = legacy_dropout(x, self.p, self.training)
        if self.inplace and out is not x:
            return x.copy_(out)
        return out
