"""Kill at every fault point, resume, and end exactly where an uninterrupted run ends.

Oracle: the same command left uninterrupted. A run is SIGKILLed at a named fault point
(``CATCAP_FAULT=<point>:kill:<nth>``, catcap.faults), every file left under its final name must
parse or load (no reader sees a half-written file), and the resumed run must end with
bit-identical weights (last and best), trainer position and log records, the same feature
store, the same results file, the same votes. The hit at which a point fires comes from a printed
seed (``CATCAP_KILL_SEED`` replays it, as in tests/e2e/test_train_resume.py)."""

import json
import sqlite3

import numpy as np
import pytest
import torch

from catcap.data.features import open_feature_store
from catcap.training.checkpoint import load_checkpoint
from reliability_helpers import assert_no_half_written_file, catcap, run
from tiny_runs import kill_step, tiny_run_overrides

pytestmark = pytest.mark.slow

# 40 images x 5 captions / 12 = 17 XE steps (epoch 1), then 4 SCST steps (epoch 2, switch_patience 0);
# checkpoints: last every 5 steps + best + last at each epoch end = 8 saves, 6 of them replacing a folder
TRAIN = {"train.save_every": 5, "train.objective": "xe_then_scst", "train.scst.switch_patience": 0}
# point -> the hits at which a kill may land (the nth is drawn from a printed seed)
TRAIN_POINTS = {
    "checkpoint.after_weights": (2, 7), "checkpoint.after_vocab": (2, 7), "checkpoint.after_trainer": (2, 7),
    "checkpoint.after_config": (2, 7), "checkpoint.before_rename": (2, 7), "folder.between_renames": (1, 5),
    # from the 6th record on, a checkpoint (step 5) exists to resume from
    "runlog.mid_line": (6, 23), "runlog.after_append": (6, 22), "train.scst_switch": (1, 1),
    # the first atomic file write: training.png at the end (the SCST reward's df cache next to the
    # data, written once per world, already exists from the uninterrupted run)
    "atomic.before_rename": (1, 1),
}


def _records(log):
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if k != "batches_per_s"} for r in rows]


@pytest.fixture(scope="module")
def uninterrupted(fault_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    proc = catcap(["train", *tiny_run_overrides(fault_world, out, **TRAIN)])
    assert proc.returncode == 0, proc.stdout
    return out


# the normal suite kills at these; `make test-slow` at every point of TRAIN_POINTS
EVERY_RUN = ("checkpoint.after_weights", "folder.between_renames", "runlog.mid_line", "train.scst_switch")


def full(*values, run_always=False):
    return pytest.param(*values, marks=() if run_always else pytest.mark.all_faults)


@pytest.mark.parametrize("point", [full(p, run_always=p in EVERY_RUN) for p in TRAIN_POINTS])
def test_training_killed_at_a_fault_point_resumes_to_identical_weights(point, fault_world, uninterrupted, tmp_path):
    nth, seed = kill_step(*TRAIN_POINTS[point])
    out = tmp_path / "run"
    args = ["train", *tiny_run_overrides(fault_world, out, **TRAIN)]
    killed = catcap(args, fault=f"{point}:kill:{nth}")
    assert killed.returncode == -9, f"not killed at {point}:{nth} (seed {seed}):\n{killed.stdout}"
    assert_no_half_written_file(out)
    resumed = catcap(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stdout
    assert "Traceback" not in resumed.stdout and "nothing to resume" not in resumed.stdout
    assert f"resumed {out / 'last'} at step" in resumed.stdout or point == "checkpoint.after_weights" and nth == 1
    for name in ("last", "best"):
        a, b = (load_checkpoint(d / name, with_trainer=True) for d in (uninterrupted, out))
        assert a["trainer"]["position"] == b["trainer"]["position"], name
        for key, tensor in a["weights"].items():
            assert torch.equal(tensor, b["weights"][key]), f"{name}: {key} differs ({point}:{nth}, seed {seed})"
        assert a["vocab"] == b["vocab"]
    assert _records(out / "log.jsonl") == _records(uninterrupted / "log.jsonl")
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == \
        sorted(p.name for p in uninterrupted.iterdir())
    assert_no_half_written_file(out)


# -- feature stores: catcap extract (a tiny fake encoder stands in for EfficientNet) ----------

EXTRACT = """
import sys
import catcap.features.extract as extract
from extract_fakes import FakeEncoder
extract.make_encoder = lambda name, backend="torch": FakeEncoder(name)
from catcap.cli.main import main
sys.exit(main(["extract", "--workers", "0", "--quiet", "--batch-size", "2", *sys.argv[1:]]))
"""


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("photos")
    for i in range(7):
        Image.new("RGB", (40 + 4 * i, 36), (30 * i, 90, 200 - 20 * i)).save(folder / f"{1000 + i}_photo.png")
    return folder


def _store(path):
    with open_feature_store(path) as store:
        return {k: store.get(k) for k in store.keys()}


@pytest.mark.parametrize("point, hits", [full("extract.after_batch", (1, 3), run_always=True),
                                         full("features.after_image", (1, 6)), full("features.before_commit", (1, 1))])
def test_extract_killed_at_a_fault_point_continues_to_the_same_store(point, hits, photos, tmp_path):
    full = tmp_path / "full.h5"
    assert run(["-c", EXTRACT, "--images", photos, "--out", full]).returncode == 0
    nth, seed = kill_step(*hits)
    out = tmp_path / "killed.h5"
    killed = run(["-c", EXTRACT, "--images", photos, "--out", out], fault=f"{point}:kill:{nth}")
    assert killed.returncode == -9, killed.stdout
    assert not out.exists() and (tmp_path / "killed.h5.partial").exists()  # never a half store under its name
    again = run(["-c", EXTRACT, "--images", photos, "--out", out])
    assert again.returncode == 0, again.stdout
    a, b = _store(full), _store(out)
    assert sorted(a) == sorted(b) and len(a) == 7
    for key in a:
        assert np.array_equal(a[key].regions, b[key].regions) and np.array_equal(a[key].boxes, b[key].boxes)
    assert_no_half_written_file(tmp_path)


# -- a results / scores file ------------------------------------------------------------------

def test_evaluate_killed_before_the_rename_leaves_the_old_scores_and_reruns_to_the_same_file(fault_world, tmp_path):
    data = json.loads(fault_world.dataset.read_text())
    results = [{"image_id": im["cocoid"], "caption": im["sentences"][0]["raw"]} for im in data["images"]
               if im["split"] == "test"]
    (tmp_path / "results.json").write_text(json.dumps(results))
    args = ["evaluate", "--results", tmp_path / "results.json", "--refs", fault_world.dataset, "--split", "test",
            "--metrics", "bleu,rouge,cider", "--quiet"]
    assert catcap([*args, "--output", tmp_path / "full.json"]).returncode == 0
    (tmp_path / "scores.json").write_text('{"old": true}\n')
    killed = catcap([*args, "--output", tmp_path / "scores.json"], fault="atomic.before_rename:kill:1")
    assert killed.returncode == -9
    assert json.loads((tmp_path / "scores.json").read_text()) == {"old": True}  # the old file, whole
    assert catcap([*args, "--output", tmp_path / "scores.json"]).returncode == 0
    assert (tmp_path / "scores.json").read_bytes() == (tmp_path / "full.json").read_bytes()
    assert_no_half_written_file(tmp_path)


# -- the human-evaluation votes ----------------------------------------------------------------

VOTES = """
import sys
from catcap.web.human_eval.store import VoteStore
store = VoteStore(sys.argv[1])
if sys.argv[2] == "create":
    store.create()
done = store.answers("r1")
for item in range(8):
    if item not in done:  # a rater resuming skips the images already answered
        store.record("r1", item, {"fluency": "AB"[item % 2], "relevance": "none"}, "AB"[item % 3 == 0])
"""


def _votes(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT rater, item, criterion, choice, shown_left FROM votes ORDER BY 1, 2, 3").fetchall()


@pytest.mark.parametrize("point, before", [full("human_eval.before_commit", 0, run_always=True),
                                           full("human_eval.after_commit", 1)])
def test_a_vote_killed_mid_write_is_all_or_nothing_and_the_rater_continues(point, before, tmp_path):
    assert run(["-c", VOTES, tmp_path / "full.sqlite", "create"]).returncode == 0
    nth, seed = kill_step(1, 8)
    killed = run(["-c", VOTES, tmp_path / "votes.sqlite", "create"], fault=f"{point}:kill:{nth}")
    assert killed.returncode == -9, killed.stdout
    kept = _votes(tmp_path / "votes.sqlite")
    assert len(kept) == 2 * (nth - 1 + before)  # whole answers only (2 criteria each)
    assert kept == _votes(tmp_path / "full.sqlite")[:len(kept)]
    assert run(["-c", VOTES, tmp_path / "votes.sqlite", "again"]).returncode == 0
    assert _votes(tmp_path / "votes.sqlite") == _votes(tmp_path / "full.sqlite")
    assert_no_half_written_file(tmp_path)


def test_an_unknown_fault_point_is_refused():
    proc = run(["-c", "import catcap.faults"], fault="checkpoint.after_weight:kill")
    assert proc.returncode == 1 and "expected <point>:<kill|oserror|sigint>[:<nth>]" in proc.stdout


def test_fault_points_parse_count_and_fire_only_when_armed():
    import errno

    from catcap import faults

    assert faults.parse("runlog.mid_line:kill:7,features.after_image:oserror") == {
        "runlog.mid_line": ("kill", 7), "features.after_image": ("oserror", 1)}
    for bad in ("nope:kill", "runlog.mid_line:explode", "runlog.mid_line:kill:0", "runlog.mid_line:kill:x", "a:b:c:d"):
        with pytest.raises(faults.FaultSpecError):
            faults.parse(bad)
    assert faults.parse(None) == {} and faults.parse("") == {}
    try:
        faults.arm("features.after_image:oserror:3")
        faults.point("features.after_image"), faults.point("features.after_image"), faults.point("runlog.mid_line")
        with pytest.raises(OSError) as info:
            faults.point("features.after_image")
        assert info.value.errno == errno.ENOSPC and "features.after_image" in str(info.value)
        faults.point("features.after_image")  # the nth hit only
    finally:
        faults.arm(None)
    assert not faults.armed("features.after_image")
    faults.point("features.after_image")  # disarmed: nothing
