"""benchmarks/flickr8k_seeds.sh (issue 37's seed trainings) shares its runs between lanes: a lane
trains a run only while it holds the run's lock, skips a run another lane holds, and lane scst skips
an arm whose XE run is unfinished instead of ending. The trainings are hours long, so ``catcap``
here is a stand-in (a shell script on PATH that writes the files a run leaves and logs each
command); the lane logic under test is the real script's."""

import fcntl
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "flickr8k_seeds.sh"

STAND_IN = r"""#!/usr/bin/env bash
# stand-in for catcap: logs "<command> <out>" and leaves the files a finished command leaves
set -e
cmd=$1; out=
for a in "$@"; do
  case $a in out_dir=*) out=${a#out_dir=} ;; esac
done
case $cmd in
  train)    echo "train $out" >> "$CALLS"; sleep "${TRAIN_S:-0}"; mkdir -p $out/best
            echo '{"model": {"cross_attention": "caca"}}' > $out/best/config.json ;;
  evaluate) while [ $# -gt 0 ]; do [ "$1" = --output ] && echo '{}' > "$2"; shift; done ;;
  analyze)  while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done; echo "analyze $out" >> "$CALLS"
            mkdir -p $out; echo '{"checkpoints": [{"num_layers": 3}]}' > $out/history_weight.json ;;
esac
"""


def workplace(tmp_path: Path) -> dict:
    """A folder with the data files the script checks for and the stand-in catcap first on PATH."""
    (tmp_path / "data" / "flickr8k").mkdir(parents=True)
    for name in ("dataset_flickr8k.json", "lite2.h5"):
        (tmp_path / "data" / "flickr8k" / name).write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "catcap").write_text(STAND_IN)
    (bin_dir / "catcap").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls.log")}


def lane(tmp_path: Path, env: dict, *args: str, **more) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=tmp_path, env={**env, **more}, capture_output=True,
                          text=True, timeout=120)


def trained(tmp_path: Path, command: str = "train") -> list[str]:
    """The folders of the stand-in's ``command`` calls (train: the runs; analyze: the history folders)."""
    calls = tmp_path / "calls.log"
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line.split()[1] for line in lines if line.split()[0] == command]


def test_a_lane_skips_the_run_another_lane_holds_and_takes_it_once_it_is_free(tmp_path):
    env = workplace(tmp_path)
    (tmp_path / "runs" / "flickr8k_seeds").mkdir(parents=True)
    with open(tmp_path / "runs" / "flickr8k_seeds" / ".cat_s0.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "another lane" trains cat_s0
        done = lane(tmp_path, env, "xe", SEEDS="0")
    assert done.returncode == 0, done.stderr
    assert "runs/flickr8k_seeds/cat_s0 is being trained by another lane: skipped here" in done.stderr
    assert trained(tmp_path) == ["runs/flickr8k_seeds/transformer_s0", "runs/flickr8k_seeds/cat_literal_s0"]
    assert not (tmp_path / "runs" / "flickr8k_seeds" / "cat_s0").exists()
    done = lane(tmp_path, env, "xe", SEEDS="0")  # the lock is free now; finished runs are not trained again
    assert done.returncode == 0, done.stderr
    assert trained(tmp_path)[2:] == ["runs/flickr8k_seeds/cat_s0"]
    assert (tmp_path / "runs" / "flickr8k_seeds" / "cat_s0" / "val_beam3.json").exists()
    # a CACA run's history curve: the top layer, then each lower one of its 3 (the stand-in's count)
    assert [a for a in trained(tmp_path, "analyze") if "/cat_s0/" in a] == [
        "runs/flickr8k_seeds/cat_s0/history", "runs/flickr8k_seeds/cat_s0/history_layer0",
        "runs/flickr8k_seeds/cat_s0/history_layer1"]


def test_two_lanes_side_by_side_train_every_run_once(tmp_path):
    env = workplace(tmp_path)
    seeds = dict(SEEDS="0 1", TRAIN_S="0.2")
    a = subprocess.Popen(["bash", str(SCRIPT), "xe"], cwd=tmp_path, env={**env, **seeds},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(["bash", "-c", f"bash {SCRIPT} xe && bash {SCRIPT} lstm"], cwd=tmp_path,
                         env={**env, **seeds}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for p in (a, b):
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    runs = trained(tmp_path)
    expected = {f"runs/flickr8k_seeds/{arm}_s{s}" for arm in ("transformer", "cat", "cat_literal", "updown",
                                                               "updown_caca") for s in (0, 1)}
    assert sorted(runs) == sorted(expected | {"runs/flickr8k_seeds/cat_literal_noawc_s0"})  # each once


def test_lane_scst_skips_an_arm_whose_xe_run_is_unfinished_and_trains_the_others(tmp_path):
    env = workplace(tmp_path)
    out = tmp_path / "runs" / "flickr8k_seeds"
    for run in ("transformer_s0", "cat_literal_s0"):
        (out / run / "best").mkdir(parents=True)
    (out / "transformer_s0" / "done").write_text("")  # cat_literal_s0 is still training
    done = lane(tmp_path, env, "scst", SEEDS="0")
    assert done.returncode == 0, done.stderr
    assert "XE run runs/flickr8k_seeds/cat_literal_s0 is not finished: its SCST run skipped" in done.stderr
    assert trained(tmp_path) == ["runs/flickr8k_seeds/transformer_scst_s0"]
    assert (out / "transformer_scst_s0" / "done").exists()
