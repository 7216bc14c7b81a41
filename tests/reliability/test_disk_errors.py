"""A full disk or an I/O error: one line, exit 1, the last good files intact.

Two ways to fail a write: ``RLIMIT_FSIZE`` set in the child (the kernel refuses to grow a file
past the limit: EFBIG, as a full quota would) and ``CATCAP_FAULT=<point>:oserror[:nth]``
(OSError(ENOSPC) raised at a fault point). Oracle: what was on disk before the failing command
(the previous checkpoint, the old output file) must load unchanged; nothing half-written may sit
under a final name; the error must be one line of stderr without a traceback."""

import json
import resource

import pytest

from catcap.training.checkpoint import load_checkpoint
from catcap.web.human_eval.store import VoteStore
from reliability_helpers import assert_no_half_written_file, catcap, run
from test_fault_points import EXTRACT, _store, photos  # noqa: F401  (the photos fixture)
from tiny_runs import tiny_run_overrides

pytestmark = pytest.mark.slow


def file_size_limit(limit: int):
    def preexec():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def one_error_line(output: str, *words: str) -> str:
    lines = [line for line in output.splitlines() if "error" in line]
    assert "Traceback" not in output, output
    assert len(lines) == 1, output
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def trained(fault_world, tmp_path_factory):
    """A run stopped after 5 steps: out/last holds step 5."""
    out = tmp_path_factory.mktemp("trained") / "run"
    args = tiny_run_overrides(fault_world, out, **{"train.max_steps": 5, "train.save_every": 5})
    assert catcap(["train", *args]).returncode == 0
    return args


def _copy_run(args, tmp_path):
    import shutil

    src = next(a.split("=", 1)[1] for a in args if a.startswith("out_dir="))
    shutil.copytree(src, tmp_path / "run")
    return [a if not a.startswith("out_dir=") else f"out_dir={tmp_path / 'run'}" for a in args], tmp_path / "run"


def full(value, run_always=False):
    return pytest.param(value, marks=() if run_always else pytest.mark.all_faults)


@pytest.mark.parametrize("how", [full("rlimit", True), full("checkpoint.after_weights", True),
                                 full("checkpoint.after_trainer"), full("checkpoint.before_rename"),
                                 full("runlog.after_append")])
def test_a_failed_write_during_training_keeps_the_last_checkpoint(how, trained, tmp_path):
    args, out = _copy_run(trained, tmp_path)
    before = load_checkpoint(out / "last", with_trainer=True)
    size = (out / "last" / "model.safetensors").stat().st_size
    more = ["train.max_steps=10", "--resume"]
    if how == "rlimit":  # the log and the JSON files fit, the weights do not
        proc = catcap(["train", *args, *more], preexec_fn=file_size_limit(size // 2))
        words = ["File too large", "model.safetensors", "--resume"]
    else:
        proc = catcap(["train", *args, *more], fault=f"{how}:oserror:1")
        words = ["No space left on device", "free some space", "--resume"]
    assert proc.returncode == 1, proc.stdout
    one_error_line(proc.stdout, "catcap train: error:", *words)
    after = load_checkpoint(out / "last", with_trainer=True)
    assert after["trainer"]["position"] == before["trainer"]["position"]  # the step-5 checkpoint, whole
    assert_no_half_written_file(out)
    assert not [p for p in out.iterdir() if p.name.startswith(".last.tmp")]  # the failed save cleaned up
    # and once the disk has room again, --resume goes on from it
    again = catcap(["train", *args, *more])
    assert again.returncode == 0, again.stdout
    assert load_checkpoint(out / "last", with_trainer=True)["trainer"]["position"]["step"] == 10


@pytest.mark.parametrize("how", [full("rlimit", True), full("features.after_image"), full("features.before_commit"),
                                 full("extract.after_batch")])
def test_a_failed_write_during_extract_leaves_no_store_under_its_name(how, photos, tmp_path):  # noqa: F811
    out = tmp_path / "f.h5"
    if how == "rlimit":
        proc = run(["-c", EXTRACT, "--images", photos, "--out", out], preexec_fn=file_size_limit(6000))
    else:
        proc = run(["-c", EXTRACT, "--images", photos, "--out", out], fault=f"{how}:oserror:{1 if how == 'features.before_commit' else 2}")
    assert proc.returncode == 1, proc.stdout
    one_error_line(proc.stdout, "catcap extract: error:")
    assert not out.exists()
    assert_no_half_written_file(tmp_path)
    again = run(["-c", EXTRACT, "--images", photos, "--out", out])  # room again: it completes
    assert again.returncode == 0, again.stdout
    assert len(_store(out)) == 7


@pytest.mark.parametrize("how", ["rlimit", "atomic.before_rename"])
def test_a_failed_results_write_keeps_the_old_file(how, fault_world, tmp_path):
    data = json.loads(fault_world.dataset.read_text())
    results = [{"image_id": im["cocoid"], "caption": "a shape"} for im in data["images"] if im["split"] == "test"]
    (tmp_path / "results.json").write_text(json.dumps(results))
    (tmp_path / "scores.json").write_text('{"old": true}\n')
    args = ["evaluate", "--results", tmp_path / "results.json", "--refs", fault_world.dataset, "--split", "test",
            "--metrics", "bleu", "--quiet", "--output", tmp_path / "scores.json"]
    if how == "rlimit":
        proc = catcap(args, preexec_fn=file_size_limit(200))
    else:
        proc = catcap(args, fault=f"{how}:oserror")
    assert proc.returncode == 1, proc.stdout
    one_error_line(proc.stdout, "catcap evaluate: error:")
    assert json.loads((tmp_path / "scores.json").read_text()) == {"old": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "scores.json"]  # no temporary left


def test_a_vote_that_cannot_be_committed_is_not_half_stored(tmp_path):
    from catcap import faults

    store = VoteStore(tmp_path / "votes.sqlite")
    store.create()
    store.record("r", 1, {"fluency": "A", "relevance": "B"}, "A")
    faults.arm("human_eval.before_commit:oserror")
    try:
        with pytest.raises(OSError, match="No space left on device"):
            store.record("r", 2, {"fluency": "B", "relevance": "B"}, "B")
    finally:
        faults.arm(None)
    assert store.answers("r") == {1: {"fluency": "A", "relevance": "B"}}
    store.record("r", 2, {"fluency": "B", "relevance": "B"}, "B")
    assert store.answers("r")[2] == {"fluency": "B", "relevance": "B"}
