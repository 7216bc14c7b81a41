"""The random generators a training run draws from, saved in checkpoints and restored on resume
(dropout, SCST sampling, scheduled sampling, shuffling): torch's CPU generator, numpy's,
Python's, and on a GPU the device's own (dropout and sampling on CUDA draw from it)."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state(device: torch.device | None = None) -> dict:
    """The generators a run draws from: torch's CPU one, numpy's, Python's, and on a GPU the
    device's own (dropout and sampling on CUDA draw from it)."""
    state = {"torch": torch.get_rng_state(), "numpy": _numpy_state(), "python": random.getstate()}
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _numpy_state() -> dict:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "gauss": float(gauss)}


def restore_rng(state: dict, device: torch.device | None = None) -> None:
    """Back to :func:`rng_state`'s generators; the GPU's only when both runs are on one."""
    torch.set_rng_state(state["torch"])
    if device is not None and device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    random.setstate(_as_tuples(state["python"]))


def _as_tuples(x):
    return tuple(_as_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x
