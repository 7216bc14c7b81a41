"""One run per log.jsonl: a new run sets an old log aside, a resumed run rewinds to its checkpoint."""

import json
import os

from catcap.training import runlog


def _write(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train(step, epoch):
    return {"kind": "train", "step": step, "epoch": epoch, "loss": 1.0 / step}


def test_rewind_drops_what_the_interrupted_run_wrote_after_its_checkpoint(tmp_path):
    # 3 steps per epoch; epoch 0 validated at step 3; killed during epoch 1 after logging step 5,
    # its last checkpoint (mid-epoch) at step 4; the last line was cut short by the kill
    records = [_train(1, 0), _train(2, 0), _train(3, 0), {"kind": "val", "step": 3, "epoch": 0, "CIDEr": 0.5},
               _train(4, 1), _train(5, 1)]
    _write(tmp_path / "log.jsonl", records, tail='{"kind": "train", "st')
    assert runlog.rewind(tmp_path, step=4, epoch=1) == 2
    assert _read(tmp_path / "log.jsonl") == records[:5]


def test_rewind_to_an_end_of_epoch_checkpoint_keeps_that_epochs_validation(tmp_path):
    # killed after validating epoch 1 (step 6) and saving, before the epoch-2 checkpoint
    records = [_train(5, 1), _train(6, 1), {"kind": "val", "step": 6, "epoch": 1, "CIDEr": 0.6},
               _train(7, 2), {"kind": "val", "step": 9, "epoch": 2, "CIDEr": 0.7}]
    _write(tmp_path / "log.jsonl", records)
    assert runlog.rewind(tmp_path, step=6, epoch=2) == 2
    assert _read(tmp_path / "log.jsonl") == records[:3]


def test_rewind_leaves_a_consistent_log_untouched(tmp_path):
    log = tmp_path / "log.jsonl"
    _write(log, [_train(1, 0), _train(2, 0)])
    before = log.stat().st_mtime_ns
    assert runlog.rewind(tmp_path, step=2, epoch=0) == 0
    assert log.stat().st_mtime_ns == before
    assert runlog.rewind(tmp_path / "no-such-run", step=2, epoch=0) == 0


def test_a_new_run_sets_the_old_log_aside(tmp_path):
    assert runlog.set_aside(tmp_path) is None
    for content in ("first run\n", "second run\n"):
        log = tmp_path / "log.jsonl"
        log.write_text(content)
        os.utime(log, (1_700_000_000, 1_700_000_000))  # same write time twice: names must not clash
        moved = runlog.set_aside(tmp_path)
        assert moved.read_text() == content and not log.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.20231114-221320-2.jsonl", "log.20231114-221320.jsonl"]


def test_machine_lines_append_and_a_new_run_sets_them_aside(tmp_path):
    runlog.note_machine(tmp_path, {"step": 0, "resumed": False})
    runlog.note_machine(tmp_path, {"step": 4, "resumed": True})
    assert _read(tmp_path / runlog.MACHINE_NAME) == [{"step": 0, "resumed": False}, {"step": 4, "resumed": True}]
    os.utime(tmp_path / runlog.MACHINE_NAME, (1_700_000_000, 1_700_000_000))
    moved = runlog.set_aside(tmp_path, runlog.MACHINE_NAME)
    assert moved.name == "machine.20231114-221320.jsonl" and len(_read(moved)) == 2
    assert not (tmp_path / runlog.MACHINE_NAME).exists() and runlog.set_aside(tmp_path, runlog.MACHINE_NAME) is None
