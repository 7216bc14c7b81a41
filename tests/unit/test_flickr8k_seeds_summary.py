"""benchmarks/flickr8k_seeds.py (issue 37's seeds report) on made-up run folders: the per-seed
and mean tables, the paired bootstrap and the history weight averaged over seeds, as a table
and as the --plot picture."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import flickr8k_seeds  # noqa: E402

IMAGES = {1: ["a dog runs on the grass", "a brown dog is running"], 2: ["a man rides a bike", "a person on a bicycle"],
          3: ["two children play in the water", "kids splash in a pool"]}


def make_run(out: Path, arm: str, seed: int, cider: float, captions: dict, history: dict | None = None,
             lower: list[dict] = ()) -> None:
    """A finished run folder; ``history``: its top layer's curve, ``lower``: layers 0.. below it."""
    run = out / f"{arm}_s{seed}"
    run.mkdir(parents=True)
    (run / "val_beam3.json").write_text(json.dumps({"corpus": {"Bleu_4": 0.2, "METEOR": 0.19, "ROUGE_L": 0.45,
                                                              "CIDEr": cider}}))
    (run / "val_beam3_results.json").write_text(json.dumps([{"image_id": i, "caption": c} for i, c in captions.items()]))
    records = [{"kind": "train", "step": 10, "epoch": 0, "batches_per_s": 0.5},
               {"kind": "val", "step": 10, "epoch": 0, "CIDEr": cider}]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    layers = len(lower) + 1
    for k, (folder, curve) in enumerate([*((f"history_layer{k}", c) for k, c in enumerate(lower)),
                                         *([("history", history)] if history else [])]):
        (run / folder).mkdir()
        curve = {"label": arm, "checkpoint": str(run / "best"), "cross_attention": "caca", "strategy": "chc",
                 "awc": True, "layer": k, "num_layers": layers, "split": "val", "images": 3, "include_eos": True,
                 "per_head": [curve["mean"]], "captions": {}, "overall": sum(curve["mean"]) / len(curve["mean"]),
                 **curve}
        (run / folder / "history_weight.json").write_text(json.dumps({"checkpoints": [curve]}))


def experiment(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "runs"
    good = {i: refs[0] for i, refs in IMAGES.items()}
    poor = {i: "a thing" for i in IMAGES}
    make_run(out, "updown", 0, 0.50, poor)
    make_run(out, "updown", 1, 0.52, poor)
    machine = {"cpu": "AMD EPYC", "cpu_capability": "AVX512", "torch": "2.13.0+cpu", "torch_threads": 1}  # seed 1: resumed on a GPU
    (out / "updown_s1" / "machine.jsonl").write_text("".join(json.dumps(m) + "\n" for m in (
        {**machine, "step": 0}, {**machine, "step": 5}, {**machine, "step": 8, "gpu": "NVIDIA H200"})))
    make_run(out, "updown_caca", 0, 0.55, good, {"mean": [0.1, 0.2, 0.3], "counts": [3, 3, 2], "beta": [0.2]})
    make_run(out, "updown_caca", 1, 0.57, good, {"mean": [0.3, 0.4], "counts": [3, 1], "beta": [0.4]})
    make_run(out, "cat_literal", 0, 0.51, poor, {"mean": [0.0, 0.02], "counts": [3, 3], "beta": [0.01]},
             lower=[{"mean": [0.1, 0.3], "counts": [3, 3], "beta": [0.2]},
                    {"mean": [0.05, 0.05], "counts": [3, 3], "beta": [0.04]}])
    refs = tmp_path / "karpathy.json"
    refs.write_text(json.dumps({"images": [
        {"imgid": i, "filename": f"{i}.jpg", "split": "val",
         "sentences": [{"raw": r, "tokens": r.split()} for r in captions]} for i, captions in IMAGES.items()]}))
    return out, refs


def test_the_arm_curve_averages_its_seeds_over_the_positions_all_reached(tmp_path):
    out, _ = experiment(tmp_path)
    (curve,) = flickr8k_seeds.arm_curves(out, ["updown", "updown_caca"])
    assert curve.label == "Up-Down + CACA + AWC (2 seeds)"
    assert curve.mean == [0.2, 0.30000000000000004] and curve.counts == [6, 4] and curve.beta == [0.30000000000000004]


def test_the_report_and_its_plot(tmp_path):
    out, refs = experiment(tmp_path)
    plot = tmp_path / "history.png"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flickr8k_seeds.py"), str(out), "--refs", str(refs),
                           "--plot", str(plot)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    # what trained each run: machine.jsonl, each distinct machine once; "not recorded" without it
    assert "| Up-Down | 0 | 20.0 | 19.0 | 45.0 | 50.0 | 1 of 1 | 0 | not recorded |" in text
    assert ("| Up-Down | 1 | 20.0 | 19.0 | 45.0 | 52.0 | 1 of 1 | 0 | AMD EPYC (AVX512), torch 2.13.0+cpu, 1 thread(s) then "
            "NVIDIA H200, torch 2.13.0+cpu, 1 thread(s) |") in text
    assert "| Up-Down + CACA + AWC | 2 | 20.00 ± 0.00 | 19.00 ± 0.00 | 45.00 ± 0.00 | 56.00 ± 1.41 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| Up-Down | Up-Down + CACA + AWC | 0,1 | CIDEr |"))
    assert float(row.split("|")[5]) > 0  # the references themselves beat "a thing" on every (image, seed)
    # a_3 from the one seed whose curve reached word 3; overall and beta: means over the seeds
    assert "| Up-Down + CACA + AWC | 2 | 0.200 | 0.300 | 0.300 | - | - | 0.275 | 0.300 |" in text
    # per decoder layer: the lower layers' curves next to the top one's (a_1, mean over words, beta)
    assert "| CAT (the paper's CACA: c_tmp entries) | 1 of 3 | 1 | 0.100 | 0.200 | 0.200 |" in text
    assert "| CAT (the paper's CACA: c_tmp entries) | 2 of 3 | 1 | 0.050 | 0.050 | 0.040 |" in text
    assert "| CAT (the paper's CACA: c_tmp entries) | 3 of 3 | 1 | 0.000 | 0.010 | 0.010 |" in text
    assert "| Up-Down + CACA + AWC | 1 of 1 | 2 | 0.200 | 0.275 | 0.300 |" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
