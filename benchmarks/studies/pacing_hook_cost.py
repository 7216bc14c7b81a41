"""The CPU cost of catcap's pacing hook (catcap/threads.py, issue 41): the hook runs before every
torch.nn module call, so its cost on a quiet machine is (cost per call) x (module calls per job).

Prints one JSON line: the CPU time per call of an ``nn.Identity`` called 200,000 times without
and with the hook (a pacer over one CPU: it never changes the count and checks the clock every
call), and the module calls of benchmarks/contention.py's paper-size greedy, beam-5 and XE-step
jobs. Results: docs/performance.md ("Threads on a shared CPU").

Usage: python benchmarks/studies/pacing_hook_cost.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # contention_jobs.py
sys.path.insert(0, str(BENCHMARKS.parent / "src"))

from contention_jobs import build_jobs  # noqa: E402


def hook_cost() -> None:
    """Print the pacing hook's CPU cost per module call and how many module calls each decoding job
    (and the XE step) makes: their product is the policy's cost on a quiet machine."""
    import torch

    from catcap import threads

    threads._PACER = threads._Pacer(threads.CpuShare(1))  # one CPU: never changes the count, checks every call
    layer, x = torch.nn.Identity(), torch.zeros(1)

    def per_call(n: int = 200_000) -> float:
        start = time.process_time()
        for _ in range(n):
            layer(x)
        return (time.process_time() - start) / n

    bare = min(per_call() for _ in range(3))
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, inputs: threads.pace())
    paced = min(per_call() for _ in range(3))
    handle.remove()
    calls = [0]
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda module, inputs: calls.__setitem__(0, calls[0] + 1))
    args = SimpleNamespace(jobs=["greedy", "beam", "xe_step"], images_per_batch=0)
    counts = {}
    for name, job in build_jobs(args).items():
        calls[0] = 0
        job()
        counts[name] = calls[0]
    handle.remove()
    print(json.dumps({"per_call_us": {"without": round(bare * 1e6, 2), "with_pacing_hook": round(paced * 1e6, 2),
                                      "added": round((paced - bare) * 1e6, 2)}, "module_calls": counts}))


if __name__ == "__main__":
    hook_cost()
