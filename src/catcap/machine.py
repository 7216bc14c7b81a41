"""What a number was computed on: the machine, the software and the settings that change floats.

Training from one seed gives the same weights on the same machine at the same thread count
(``catcap.training.loop``), but another CPU family or PyTorch build picks other kernels, whose
rounding differs, and the run drifts: on Flickr8k the same seed lands up to 1.4 CIDEr-D apart on
two machines of one kind (benchmarks/flickr8k.md). So ``catcap train`` writes :func:`describe`
into every run folder (``machine.jsonl``, :mod:`catcap.training.runlog`), one line per start
or resume, and a result can be traced to what computed it.

:func:`describe` reads, never sets: the CPU model and instruction set PyTorch dispatches to
(``torch.backends.cpu.get_cpu_capability``), the CPUs this process may use and PyTorch's thread
count, who computes fp32 CPU Linear layers (``catcap.models.linear``), the CUDA card, driver-side
CUDA version and cuDNN, Python, PyTorch, catcap and the git commit of the catcap source (with
``dirty`` when it has uncommitted changes; None outside a git checkout). Importing this module
loads no torch (:func:`cpu_model` serves harnesses that must not); :func:`describe` does.
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import catcap


def describe(device="cpu") -> dict:
    """The machine and software ``device`` (a ``torch.device`` or its name) computes on, JSON-ready
    (see the module doc)."""
    import torch

    device = torch.device(device)
    info = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "catcap": catcap.__version__,
        "commit": source_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    if device.type == "cpu":
        from catcap.models.linear import cpu_gemm_backend

        info["cpu_gemm"] = cpu_gemm_backend()
    elif device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        info["gpu"] = torch.cuda.get_device_name(index)
        info["cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def source_commit() -> str | None:
    """The git commit of the catcap source this process imported, ``+dirty`` when its tree has
    uncommitted changes; None when the source is not in a git checkout (an installed wheel) or
    git is missing."""
    here = Path(catcap.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "."],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
