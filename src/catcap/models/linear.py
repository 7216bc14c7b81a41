"""``Linear``: ``nn.Linear`` whose fp32 CPU products may run through oneDNN instead of MKL.

Why: PyTorch's CPU wheels compute fp32 ``Linear`` layers with MKL's sgemm, and MKL picks its
kernels by CPU vendor: on AMD CPUs it takes its AVX2 path even where the CPU has AVX-512. The
oneDNN library bundled in the same wheel dispatches on the CPU's instruction sets instead. On
this project's AMD EPYC (Zen 5) VM, one thread, torch 2.13: the paper-size products run at
~90 GFLOP/s through MKL and ~145-230 GFLOP/s through oneDNN (``benchmarks/gemm_floor.py``;
``benchmarks/results/decode.md``), in forward and in both backward products.

Which backend (``cpu_gemm_backend``), decided once per process:

- ``CATCAP_CPU_GEMM=onednn`` or ``=torch`` (the environment variable) forces one;
- ``auto`` (default): oneDNN when PyTorch was built with MKL and oneDNN, the CPU is not an
  Intel one (``vendor_id`` in ``/proc/cpuinfo``) and PyTorch's CPU capability is AVX-512,
  i.e. exactly the case where MKL leaves half the machine unused; else PyTorch's own path.

oneDNN is only used for float32 CPU tensors outside autocast and ``torch.compile`` (both
have their own kernels), and only for products of at least ``MIN_MACS`` multiply-adds: a
oneDNN call costs ~12-15 us more than MKL's, so MKL wins below about a million (measured:
50 x 128 x 128 breaks even, 1 x 512 x 512 is 1.5x slower through oneDNN, 5 x 512 x 512 1.3x
faster). Everything else (GPU, bf16/fp16, compiled graphs) goes through
``torch.nn.functional.linear`` unchanged. The two backends sum in different orders, so
results differ in the last bits (relative ~1e-6), as they would between two BLAS libraries.
The oneDNN entry point (``torch.ops.mkldnn._linear_pointwise``, the op Inductor emits for
CPU linears) is private to PyTorch: it is checked against ``F.linear`` on first use and, if
it is missing or disagrees, catcap falls back to PyTorch's path with a warning.

**Packed weights for decoding.** A oneDNN product from a plain (out, in) weight is slower than
from the same weight packed beforehand into oneDNN's blocked layout (as Inductor's frozen
graphs do). In eval mode without gradients (decoding, evaluation, captioning) a :class:`Linear`
instead packs its weight once (``_reorder_linear_weight``) and reads the packed copy until the
weight changes: the same results to the bit (checked for 2 to 2,500 rows; a single row keeps
the plain path, whose kernel sums in another order), each product 15-20% faster at 50 rows and
~3% at 250; greedy decoding of the paper-size Transformer 0.924x the time, beam 5 0.970x (quiet
machine; ``benchmarks/studies/decode_levers.py --levers packed_weights``). The copy costs the
weight's size again in memory, is never saved, and is dropped by ``train()``. A change is seen
through the weight's identity and version counter (optimizer steps, in-place ops,
``load_state_dict``); writes through ``weight.data`` bypass the counter: after such a write call
``model.train()`` once, or write under ``torch.no_grad()`` instead.

Weights keep ``nn.Linear``'s names and shapes, so checkpoints are unaffected.
"""

from __future__ import annotations

import os
import warnings
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ENV_VAR = "CATCAP_CPU_GEMM"
BACKENDS = ("auto", "onednn", "torch")
MIN_MACS = 1 << 20  # rows x in x out below which a product stays on PyTorch's path
PACK_ROWS = 64  # the row count oneDNN packs weights for (the same layout served 1 to 850 rows best)


class Linear(nn.Linear):
    """``nn.Linear`` (same parameters, same init) computed by :func:`linear`; in eval mode
    without gradients, oneDNN reads a packed copy of the weight (:meth:`packed_weight`)."""

    def forward(self, x: Tensor) -> Tensor:
        if not _use_onednn(x, self.weight):
            return F.linear(x, self.weight, self.bias)
        if not self.training and not torch.is_grad_enabled() and x.numel() >= 2 * self.in_features:
            return _product(x, self.packed_weight(), self.bias)  # one row: the packed kernel sums in another order
        return _onednn_linear(x, self.weight, self.bias)

    def packed_weight(self) -> Tensor:
        """The weight in oneDNN's blocked layout, packed once and kept until the weight changes
        (another tensor, or its version counter moved: an optimizer step, ``load_state_dict``)."""
        w, cached = self.weight, self.__dict__.get("_packed")
        key = (w.data_ptr(), w._version)
        if cached is None or cached[0] != key:
            cached = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), PACK_ROWS))
            self.__dict__["_packed"] = cached  # a plain attribute: never in the state dict
        return cached[1]

    def train(self, mode: bool = True):
        if mode:
            self.__dict__.pop("_packed", None)  # training changes the weights: drop the copy
        return super().train(mode)

    def __getstate__(self):  # copies and pickles of the module leave the packed copy out
        return {k: v for k, v in self.__dict__.items() if k != "_packed"}


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x W^T + b`` for x (..., in), weight (out, in), bias (out,) -> (..., out)."""
    return _onednn_linear(x, weight, bias) if _use_onednn(x, weight) else F.linear(x, weight, bias)


def _onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's product, through :class:`_OneDNNLinear` when a gradient is wanted."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _OneDNNLinear.apply(x, weight, bias)
    return _product(x, weight, bias)


def _use_onednn(x: Tensor, weight: Tensor) -> bool:
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and x.numel() * weight.shape[0] >= MIN_MACS and cpu_gemm_backend() == "onednn"
            and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling())


def _product(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's ``x W^T + b``; x (..., in) any strides, weight (out, in) any strides."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """Forward and both backward products through oneDNN (transposes are strided views)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _product(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _product(grad, weight.t(), None)  # (..., out) @ (out, in)
        if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
            rows = grad.reshape(-1, grad.shape[-1])  # (R, out)
            if ctx.needs_input_grad[1]:
                # oneDNN takes a transposed contiguous matrix as its second operand, but an input
                # sliced from a larger tensor (an LSTM's word at step t, rows T*E apart) made it
                # take ~1,600x longer (100 ms for a 512 x 50 x 64 product): give it rows
                inputs = x.reshape(-1, x.shape[-1]).contiguous()
                grad_w = _product(rows.t(), inputs.t(), None)  # (out, R) @ (R, in)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b


@lru_cache(maxsize=1)
def cpu_gemm_backend() -> str:
    """``"onednn"`` or ``"torch"``: who computes fp32 CPU Linear layers in this process."""
    choice = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ValueError(f"{ENV_VAR}={choice!r} is not a backend; expected one of {', '.join(BACKENDS)} "
                         f"(unset it for 'auto')")
    if choice == "torch":
        return "torch"
    if choice == "auto" and not _mkl_on_avx512_non_intel():
        return "torch"
    problem = _onednn_problem()
    if problem:
        warnings.warn(f"catcap: oneDNN linear unavailable ({problem}); using PyTorch's own CPU "
                      f"products (set {ENV_VAR}=torch to silence this)", RuntimeWarning, stacklevel=2)
        return "torch"
    return "onednn"


def _mkl_on_avx512_non_intel() -> bool:
    """True where MKL's vendor dispatch leaves AVX-512 unused: non-Intel CPU with AVX-512."""
    if not (torch.backends.mkl.is_available() and torch.backends.mkldnn.is_available()):
        return False
    if not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        return False
    vendor = _cpu_vendor()
    return vendor is not None and vendor != "GenuineIntel"


def _cpu_vendor() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _onednn_problem() -> str | None:
    """None if oneDNN's product matches ``F.linear`` on a small case, else what went wrong."""
    if not torch.backends.mkldnn.is_available():
        return "PyTorch was built without oneDNN"
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen) for s in ((5, 3, 24), (16, 24), (16,)))
    with torch.autocast("cpu", enabled=False):  # the first use may come inside a bf16 autocast
        try:
            got = _product(x, w, b)
        except (RuntimeError, AttributeError, TypeError) as err:
            return f"torch.ops.mkldnn._linear_pointwise failed: {str(err).splitlines()[0]}"
        expected = F.linear(x, w, b)
    if got.shape != (5, 3, 16) or not torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
        return "torch.ops.mkldnn._linear_pointwise disagrees with torch.nn.functional.linear"
    return None
