"""benchmarks/flickr8k_seeds.sh (issue 37's seed trainings) shares its runs between lanes: a lane
trains a run only while it holds the run's lock, skips a run another lane holds, and lane scst skips
an arm whose XE run is unfinished instead of ending. Every finished run's small files are recorded
(RECORD, committed) so that they outlive the machine, a lane skips recorded runs, and lane xe trains
an arm's SCST run right after its XE run. The trainings are hours long, so ``catcap`` here is a
stand-in (a shell script on PATH that writes the files a run leaves and logs each command); the lane
logic under test is the real script's."""

import fcntl
import json
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
            echo '{"kind": "train", "step": 20}' > $out/log.jsonl; echo '{"step": 0}' > $out/machine.jsonl
            echo '{"model": {"cross_attention": "caca"}}' > $out/best/config.json ;;
  evaluate) while [ $# -gt 0 ]; do
              case $1 in --output) echo '{"corpus": {"CIDEr": 0.5}, "per_image": [{"CIDEr": 0.5}]}' > "$2" ;;
                         --save-results) echo '[]' > "$2" ;; esac; shift
            done ;;
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
        done = lane(tmp_path, env, "xe", SEEDS="0", SCST_ARMS="")
    assert done.returncode == 0, done.stderr
    assert "runs/flickr8k_seeds/cat_s0 is being trained by another lane: skipped here" in done.stderr
    assert trained(tmp_path) == ["runs/flickr8k_seeds/transformer_s0", "runs/flickr8k_seeds/cat_literal_s0"]
    assert not (tmp_path / "runs" / "flickr8k_seeds" / "cat_s0").exists()
    done = lane(tmp_path, env, "xe", SEEDS="0", SCST_ARMS="")  # the lock is free now; finished runs are not trained again
    assert done.returncode == 0, done.stderr
    assert trained(tmp_path)[2:] == ["runs/flickr8k_seeds/cat_s0"]
    assert (tmp_path / "runs" / "flickr8k_seeds" / "cat_s0" / "val_beam3.json").exists()
    # a CACA run's history curve: the top layer, then each lower one of its 3 (the stand-in's count)
    assert [a for a in trained(tmp_path, "analyze") if "/cat_s0/" in a] == [
        "runs/flickr8k_seeds/cat_s0/history", "runs/flickr8k_seeds/cat_s0/history_layer0",
        "runs/flickr8k_seeds/cat_s0/history_layer1"]


def test_two_lanes_side_by_side_train_every_run_once(tmp_path):
    env = workplace(tmp_path)
    seeds = dict(SEEDS="0 1", TRAIN_S="0.2", SCST_ARMS="")
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


def test_a_finished_run_is_recorded_with_its_small_files_and_a_recorded_run_is_not_trained_again(tmp_path):
    env = workplace(tmp_path)
    done = lane(tmp_path, env, "xe", SEEDS="0", XE_ARMS="cat", SCST_ARMS="")
    assert done.returncode == 0, done.stderr
    kept = tmp_path / "benchmarks" / "results" / "flickr8k_seeds" / "cat_s0"
    assert sorted(str(f.relative_to(kept)) for f in kept.rglob("*") if f.is_file()) == [
        "config.json", "history/history_weight.json", "history_layer0/history_weight.json",
        "history_layer1/history_weight.json", "log.jsonl", "machine.jsonl", "val_beam3.json", "val_beam3_results.json"]
    assert not list(kept.parent.glob(".*")), "the temporary folder was left behind"
    assert json.loads((kept / "val_beam3.json").read_text()) == {"corpus": {"CIDEr": 0.5}}  # per-image scores left out
    # a new machine: the run folders are gone, the record is not; nothing is trained again
    import shutil
    shutil.rmtree(tmp_path / "runs")
    done = lane(tmp_path, env, "xe", SEEDS="0", XE_ARMS="cat", SCST_ARMS="")
    assert done.returncode == 0, done.stderr
    assert "runs/flickr8k_seeds/cat_s0 is recorded in benchmarks/results/flickr8k_seeds: skipped" in done.stderr
    assert trained(tmp_path) == ["runs/flickr8k_seeds/cat_s0"]


def test_lane_xe_trains_the_scst_run_right_after_its_xe_run(tmp_path):
    env = workplace(tmp_path)
    done = lane(tmp_path, env, "xe", SEEDS="0", XE_ARMS="transformer cat", SCST_ARMS="transformer")
    assert done.returncode == 0, done.stderr
    assert trained(tmp_path) == ["runs/flickr8k_seeds/transformer_s0", "runs/flickr8k_seeds/transformer_scst_s0",
                                 "runs/flickr8k_seeds/cat_s0"]
    assert (tmp_path / "benchmarks" / "results" / "flickr8k_seeds" / "transformer_scst_s0" / "log.jsonl").exists()


def test_an_scst_run_whose_xe_run_is_recorded_but_not_here_is_skipped_saying_how_to_train_both(tmp_path):
    env = workplace(tmp_path)
    kept = tmp_path / "benchmarks" / "results" / "flickr8k_seeds" / "transformer_s0"
    kept.mkdir(parents=True)
    (kept / "val_beam3_results.json").write_text("[]")
    done = lane(tmp_path, env, "scst", SEEDS="0", SCST_ARMS="transformer")
    assert done.returncode == 0, done.stderr
    assert ("XE run runs/flickr8k_seeds/transformer_s0 is recorded but its checkpoint is not on this machine"
            in done.stderr)
    assert trained(tmp_path) == []


def test_lane_record_copies_the_finished_runs_an_older_script_scored(tmp_path):
    env = workplace(tmp_path)
    out = tmp_path / "runs" / "flickr8k_seeds"
    for run, finished in (("updown_s0", True), ("updown_s1", False)):
        (out / run / "best").mkdir(parents=True)
        for name in ("val_beam3.json", "val_beam3_results.json", "log.jsonl", "best/config.json"):
            (out / run / name).write_text("{}")
        if finished:
            (out / run / "done").write_text("")
    done = lane(tmp_path, env, "record")
    assert done.returncode == 0, done.stderr
    record = tmp_path / "benchmarks" / "results" / "flickr8k_seeds"
    assert sorted(p.name for p in record.iterdir()) == ["updown_s0"]  # updown_s1 is still training
