"""Distributed training with torchrun: the process group, shards and collectives catcap uses.

catcap never starts processes itself: ``torchrun --nproc_per_node=N -m catcap train ...`` starts
N copies and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous variables;
:func:`setup_distributed` joins the group (``nccl`` on GPUs, ``gloo`` on CPUs). Without those
variables (``python -m catcap train``) everything here is a no-op and the run is one process.

Rules (docs/distributed.md):

- **Global batch**: ``train.batch_size`` is the global batch. Every global batch (the same
  seeded permutation as a one-process run) is dealt to the ranks, ``batch[rank::world]``; the
  losses are weighted so that the gradient equals the one-process gradient of the whole
  batch (token-mean XE, caption-mean AWC and SCST losses are exact global means).
- **Validation** is sharded, ``images[rank::world]``; the captions are gathered on every rank in
  dataset order before scoring, so every image is scored exactly once.
- Rank 0 alone logs, draws progress bars and writes checkpoints; every rank's torch RNG state is
  saved so that a resumed run continues each rank's dropout stream.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Sequence

import torch
import torch.distributed as dist

from catcap.config import ConfigError

@dataclass(frozen=True)
class DistContext:
    """Where this process stands: ``rank`` of ``world`` processes, its ``device``."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def is_main_process() -> bool:
    """Rank 0 of a torchrun launch, or a plain one-process run."""
    return int(os.environ.get("RANK", "0")) == 0


def pick_device(name: str, local_rank: int | None = None) -> torch.device:
    """``auto`` (CUDA when there is one), ``cpu`` or ``cuda``; under torchrun, GPU = local rank
    (by default torchrun's ``LOCAL_RANK``, so that a sharded ``catcap evaluate`` or ``caption``
    puts each rank on its own GPU)."""
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0")) if launched_by_torchrun() else 0
    if name not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"unknown device {name!r}: expected auto, cpu or cuda (e.g. --device cpu)")
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("the device is cuda (--device cuda or train.device=cuda) but no CUDA device is "
                              "available; use --device cpu or auto (and, for GPUs, a CUDA build of torch: "
                              "docs/install.md, 'GPUs')")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible; "
                              "use --nproc_per_node <= the number of GPUs")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup_distributed(device_name: str = "auto", timeout_s: int = 1800) -> DistContext:
    """Join torchrun's process group when launched by it; else a one-process context."""
    if not launched_by_torchrun():
        return DistContext(device=pick_device(device_name))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_name, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=timeout_s))
    return DistContext(rank, world, local_rank, device)


def teardown(ctx: DistContext, wait: bool = True) -> None:
    """Leave the process group. After a run that finished (``wait``) every rank first waits for
    the others (a barrier), so that no rank tears the group down while another is still in a
    collective; after an error it leaves at once, so that torchrun sees the failed rank instead
    of a rank blocked in a barrier. Drop every DistributedDataParallel wrapper first
    (:func:`catcap.api.train` does): DDP holds the process group, which then outlives
    ``destroy_process_group`` and is destroyed at interpreter exit, where gloo's threads abort
    the process ("terminate called without an active exception"; 1 of 9 two-process CPU runs
    under load before, 0 of 65 after)."""
    if ctx.enabled and dist.is_initialized():
        try:
            if wait:
                dist.barrier()
        finally:
            dist.destroy_process_group()


def all_sum(values: Sequence[float], ctx: DistContext) -> list[float]:
    """Element-wise sum over ranks of a few numbers (float64 on the wire)."""
    if not ctx.enabled:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_wire(ctx))
    dist.all_reduce(t)
    return t.cpu().tolist()


def gather_rows(rows: torch.Tensor, ctx: DistContext, pad: int = 0) -> list[torch.Tensor]:
    """Every rank's (n_r, L_r) integer tensor, on every rank, in rank order (CPU tensors).

    Rows are padded to a common width with ``pad`` for the exchange and cut back after.
    """
    if not ctx.enabled:
        return [rows.cpu()]
    dev = _wire(ctx)
    shape = torch.tensor(list(rows.shape), dtype=torch.long, device=dev)
    shapes = [torch.zeros_like(shape) for _ in range(ctx.world)]
    dist.all_gather(shapes, shape)
    n_max, w_max = (max(int(s[i]) for s in shapes) for i in (0, 1))
    buf = torch.full((n_max, w_max), pad, dtype=torch.long, device=dev)
    buf[:rows.shape[0], :rows.shape[1]] = rows.to(dev, torch.long)
    bufs = [torch.empty_like(buf) for _ in range(ctx.world)]
    dist.all_gather(bufs, buf)
    return [b[:int(s[0]), :int(s[1])].cpu() for b, s in zip(bufs, shapes)]


def gather_rng_states(ctx: DistContext, state: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Every rank's ``state`` (a uint8 RNG state; default torch's CPU one, e.g. the GPU's
    ``torch.cuda.get_rng_state()``), rank order (one-element list in one process)."""
    state = torch.get_rng_state() if state is None else state
    if not ctx.enabled:
        return [state]
    return [r[0].to(torch.uint8) for r in gather_rows(state.to(torch.long)[None], ctx)]


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def _wire(ctx: DistContext) -> torch.device:
    """Tensors for collectives live on the GPU with nccl, on the CPU with gloo."""
    return ctx.device if ctx.device.type == "cuda" else torch.device("cpu")
