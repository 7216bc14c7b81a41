"""Atomic writes: the old file or the new one, never a part; no temporary files left behind."""

import json
import os
import stat

import numpy as np
import pytest

from catcap.atomic import atomic_path, atomic_write, write_bytes_atomic, write_json_atomic, write_text_atomic


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_and_replaces(tmp_path):
    target = tmp_path / "sub" / "out.json"  # missing folders are made
    write_json_atomic(target, {"caption": "un café"})
    assert target.read_text(encoding="utf-8") == '{\n "caption": "un café"\n}\n'
    write_text_atomic(target, "second")
    assert target.read_text() == "second"
    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]


def test_an_error_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "scores.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_write(target) as f:
            f.write("half of the new")
            raise RuntimeError("disk on fire")
    assert target.read_text() == "old"
    with pytest.raises(TypeError):
        write_json_atomic(target, {"not json": object()})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.json"]


def test_new_files_get_the_umask_mode_and_existing_ones_keep_theirs(tmp_path):
    old = os.umask(0o027)
    try:
        import importlib

        import catcap.atomic as atomic

        importlib.reload(atomic)  # the umask is read once, at import
        fresh = tmp_path / "fresh.txt"
        atomic.write_text_atomic(fresh, "x")
        assert _mode(fresh) == 0o640  # not mkstemp's private 0o600
        kept = tmp_path / "kept.txt"
        kept.write_text("x")
        kept.chmod(0o604)
        atomic.write_text_atomic(kept, "y")
        assert _mode(kept) == 0o604 and kept.read_text() == "y"
    finally:
        os.umask(old)
        importlib.reload(atomic)


def test_atomic_path_serves_writers_that_take_a_file_name(tmp_path):
    target = tmp_path / "arrays.npz"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".arrays.npz.") and not target.exists()
        with open(tmp, "wb") as f:
            np.savez(f, a=np.arange(3))
    assert np.load(target)["a"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["arrays.npz"]


def test_two_writers_of_one_file_do_not_share_a_temporary(tmp_path):
    target = tmp_path / "log.json"
    with atomic_path(target) as first, atomic_path(target) as second:
        assert first != second
        first.write_text(json.dumps(1))
        second.write_text(json.dumps(2))
    assert json.loads(target.read_text()) == 1  # the outer block finishes last and wins


def test_mode_must_be_text_or_bytes(tmp_path):
    with pytest.raises(ValueError, match="'w' \\(text\\) or 'wb'"):
        with atomic_write(tmp_path / "x", "a"):
            pass
