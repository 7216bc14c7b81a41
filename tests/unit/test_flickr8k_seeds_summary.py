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


def make_run(out: Path, arm: str, seed: int, cider: float, captions: dict, history: dict | None = None) -> None:
    run = out / f"{arm}_s{seed}"
    run.mkdir(parents=True)
    (run / "val_beam3.json").write_text(json.dumps({"corpus": {"Bleu_4": 0.2, "METEOR": 0.19, "ROUGE_L": 0.45,
                                                              "CIDEr": cider}}))
    (run / "val_beam3_results.json").write_text(json.dumps([{"image_id": i, "caption": c} for i, c in captions.items()]))
    records = [{"kind": "train", "step": 10, "epoch": 0, "batches_per_s": 0.5},
               {"kind": "val", "step": 10, "epoch": 0, "CIDEr": cider}]
    (run / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if history:
        (run / "history").mkdir()
        curve = {"label": arm, "checkpoint": str(run / "best"), "cross_attention": "caca", "strategy": "chc",
                 "awc": True, "layer": 0, "num_layers": 1, "split": "val", "images": 3, "include_eos": True,
                 "per_head": [history["mean"]], "captions": {}, "overall": sum(history["mean"]) / len(history["mean"]),
                 **history}
        (run / "history" / "history_weight.json").write_text(json.dumps({"checkpoints": [curve]}))


def experiment(tmp_path: Path) -> tuple[Path, Path]:
    out = tmp_path / "runs"
    good = {i: refs[0] for i, refs in IMAGES.items()}
    poor = {i: "a thing" for i in IMAGES}
    make_run(out, "updown", 0, 0.50, poor)
    make_run(out, "updown", 1, 0.52, poor)
    make_run(out, "updown_caca", 0, 0.55, good, {"mean": [0.1, 0.2, 0.3], "counts": [3, 3, 2], "beta": [0.2]})
    make_run(out, "updown_caca", 1, 0.57, good, {"mean": [0.3, 0.4], "counts": [3, 1], "beta": [0.4]})
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
    assert "| Up-Down + CACA + AWC | 2 | 20.00 ± 0.00 | 19.00 ± 0.00 | 45.00 ± 0.00 | 56.00 ± 1.41 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| Up-Down | Up-Down + CACA + AWC | 0,1 | CIDEr |"))
    assert float(row.split("|")[5]) > 0  # the references themselves beat "a thing" on every (image, seed)
    # a_3 from the one seed whose curve reached word 3; overall and beta: means over the seeds
    assert "| Up-Down + CACA + AWC | 2 | 0.200 | 0.300 | 0.300 | - | - | 0.275 | 0.300 |" in text
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
