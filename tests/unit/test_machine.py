"""catcap.machine.describe: what computed a number, read from this process and this checkout."""

import json
import subprocess
from pathlib import Path

import torch

import catcap
from catcap.machine import describe, source_commit


def test_describe_names_this_process_software_and_cpu():
    info = describe("cpu")
    json.dumps(info)  # JSON-ready
    assert info["torch"] == torch.__version__ and info["catcap"] == catcap.__version__
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch_threads"] == torch.get_num_threads() and info["cpus_available"] >= 1
    assert info["device"] == "cpu" and info["cpu_gemm"] in ("torch", "onednn") and info["cpu"]
    assert "gpu" not in info


def test_source_commit_is_the_checkouts_head():
    src = Path(catcap.__file__).resolve().parent
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:  # an installed wheel: no checkout to name
        assert source_commit() is None
        return
    assert source_commit().removesuffix("+dirty") == head.stdout.strip()
