"""The prepared GPU run (benchmarks/gpu_checks.sh) on a CPU: the script parses, its default
steps call only entry points that run here in their smoke mode (``--device cpu --quick``), and
the static reference decoder's beam search of width 1 is its greedy decoding (its bookkeeping)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_script_parses_and_its_default_steps_are_tests_and_targets():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    assert re.search(r'^STEPS=\$\{STEPS:-tests targets\}$', text, re.M)
    targets = re.search(r"^step targets \d+ python3 benchmarks/gpu/targets\.py (.*)$", text, re.M).group(1)
    flags = set(re.findall(r"--[a-z-]+", targets))
    help_text = run("benchmarks/gpu/targets.py", "--help")
    assert flags and all(flag in help_text for flag in flags)
    limits = [int(n) for n in re.findall(r"^step (?:tests|targets) (\d+) ", text, re.M)]
    assert len(limits) == 2 and sum(limits) < 8 * 60  # the default run fits in 8 minutes


def test_reference_decoder_smoke_on_cpu():
    lines = [json.loads(line) for line in run("benchmarks/gpu/reference_decoder.py", "--device", "cpu", "--quick",
                                              "--repeats", "1").splitlines()]
    assert {(x["job"], x["mode"]) for x in lines} == {("greedy", "eager"), ("beam", "eager")}
    assert all(x["words"] == 6 and x["seconds"] > 0 for x in lines)


def test_reference_beam_of_width_one_is_greedy():
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from reference_decoder import build

    model, features, mask, _ = build(torch.device("cpu"), quick=True)
    with torch.no_grad():
        greedy, beam = model.greedy(features, mask), model.beam(features, mask, k=1)
        wider = model.beam(features, mask, k=5)
    assert torch.equal(greedy, beam)
    assert wider.shape == greedy.shape and bool((wider > 2).all())  # words only: <eos>, <bos>, <pad> never chosen


def test_targets_smoke_on_cpu(tmp_path):
    out = tmp_path / "targets.md"
    stdout = run("benchmarks/gpu/targets.py", "--device", "cpu", "--quick", "--repeats", "1", "--profile",
                 "--out", str(out))
    table = out.read_text()
    for model in ("transformer", "cat", "lightcat", "m2", "m2_caca"):
        for job in ("greedy", "beam"):
            for mode in ("today", "static"):
                assert f"| {model} | {job} | {mode} |" in table
    assert "| transformer | scst | today |" in table and "| reference | beam | eager |" in table
    assert "not judged (smoke run" in table and "| yes |" not in table and "| NO |" not in table
    assert json.loads(stdout.splitlines()[0]) == {"self_critical": "skipped", "why": "--quick"}
    assert "| transformer | scst bf16 | today |" in table and "| the same, both under bf16 autocast" in table
    profiles = [x for x in map(json.loads, filter(lambda line: line.startswith("{"), stdout.splitlines()))
                if "profile" in x]
    assert {(x["job"], x["mode"]) for x in profiles} >= {("scst", "today"), ("scst update bf16", "eager"),
                                                         ("greedy", "static")}
    for x in profiles:  # on a CPU: top-level operators, one thread, so their sum fits in the wall time
        r = x["profile"]
        assert r["kernels"] > 0 and 0 < r["busy_ms"] <= r["wall_ms"] and len(r["top"]) <= 4
        assert r["gflop"] > 0  # every job multiplies matrices
    update = next(x["profile"]["gflop"] for x in profiles if (x["job"], x["mode"]) == ("scst update", "eager"))
    sample = next(x["profile"]["gflop"] for x in profiles if (x["job"], x["mode"]) == ("scst sample", "today"))
    step = next(x["profile"]["gflop"] for x in profiles if (x["job"], x["mode"]) == ("scst", "today"))
    assert abs(step - (sample + update)) < 0.01 * step  # the step is its two phases


def test_kernel_summary_sums_counts_and_ranks_by_name():
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from targets import kernel_summary

    spans = [("gemm", 10.0), ("softmax", 3.0), ("gemm", 5.0), ("x" * 80, 20.0), ("copy", 1.0)]
    summary = kernel_summary(spans, top=2)
    assert summary == {"busy_ms": 0.039, "kernels": 5, "top": [("x" * 60, 0.02), ("gemm", 0.015)]}


def test_the_timed_eager_scst_update_runs_under_the_precision_it_is_labelled_with():
    """targets.py's "today" SCST update is the trainer's eager step: under bf16 autocast in a bf16
    row (else "today" would be timed in fp32 against a bf16 graph)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    import targets
    from catcap.training.precision import Precision
    from catcap.training.scst_graph import UpdateGraphs
    from catcap.training.setup import make_optimizer

    device, size = torch.device("cpu"), targets.QUICK
    model = targets.catcap_model("transformer", size, True, device)
    features, mask = torch.randn(2, size["regions"], size["features"]), torch.ones(2, size["regions"], dtype=torch.bool)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        graphs = UpdateGraphs(Precision(precision, device), 1.0, "norm", size["words"] + 1, 0)
        drawn = targets.scst_sample(model, features, mask, size, "today", graphs.precision)
        seen = []
        hook = model.decoder.output.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
        try:
            targets.scst_update(graphs, model, features, mask, drawn, make_optimizer(model.parameters(), device, lr=1e-9),
                                torch.rand(10), graphed=False)
        finally:
            hook.remove()
        assert seen == [dtype]
