"""`catcap demo` end to end on a small world: trains, evaluates, beats the baseline."""

import re
import subprocess
import sys


def test_demo_small_world_beats_the_most_frequent_caption(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "catcap", "demo", "--out", str(tmp_path / "demo"), "--train-images", "800",
         "--beam", "2", "train.epochs=4", "train.progress=false", "train.schedule.warmup=200"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    row = re.search(r"^CIDEr\s+([\d.]+)\s+([\d.]+)$", out, re.M)
    assert row, out
    model, baseline = float(row.group(1)), float(row.group(2))
    assert model > 3 * baseline and model > 0.3, out
    assert "catcap:" in out and "reference:" in out
    assert (tmp_path / "demo" / "model" / "best" / "model.safetensors").exists()
