"""`catcap extract --shard I/N` + `catcap merge`: the merged store is the one-process store, byte for byte."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from catcap.cli.main import main
from catcap.data.features import open_feature_store

LAUNCHER = Path(__file__).with_name("fake_extract_main.py")


# 3999_bad.png is the last photo (by name, and in photo_dataset): the whole job and the last shard exit
# with 1, some photos could not be read (docs/cli.md); the other shards with 0
def _extract(photos, out, *extra, dataset=None):
    args = ["extract", "--images", str(photos), "--out", str(out), "--workers", "0", "--batch-size", "2", "--quiet"]
    return main(args + (["--dataset", str(dataset)] if dataset else []) + list(extra))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _contents(path: Path) -> dict:
    """Every attribute and dataset of an HDF5 file, by path (for a readable diff when bytes differ)."""
    found = {}
    with h5py.File(path, "r") as f:
        found["/"] = dict(f.attrs)
        f.visititems(lambda name, obj: found.__setitem__(name, (dict(obj.attrs), obj[()].tobytes() if
                                                                isinstance(obj, h5py.Dataset) else None)))
    return found


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("keyed", ["file-stem", "image-id"])
def test_merged_shards_equal_one_process_byte_for_byte(fake_encoders, photos, photo_dataset, tmp_path, count, keyed,
                                                       capsys):
    dataset = photo_dataset if keyed == "image-id" else None
    assert _extract(photos, tmp_path / "one" / "feats.h5", dataset=dataset) == 1
    out = tmp_path / "many" / "feats.h5"
    for i in range(count):
        assert _extract(photos, out, "--shard", f"{i}/{count}", dataset=dataset) == (1 if i == count - 1 else 0)
    assert "catcap merge" in capsys.readouterr().err and not out.exists()
    assert main(["merge", str(out), "--quiet"]) == 0
    one = tmp_path / "one" / "feats.h5"
    assert _contents(out) == _contents(one)
    assert _digest(out) == _digest(one)  # same writer, same order: the same file
    with open_feature_store(out) as store:
        assert store.meta["keys"] == keyed and len(store) == 7
    errors = Path(str(out) + ".errors.txt")
    assert errors.read_text() == Path(str(one) + ".errors.txt").read_text() and "3999_bad.png" in errors.read_text()
    assert sorted(p.name for p in out.parent.iterdir()) == ["feats.h5", "feats.h5.errors.txt"]  # parts removed


def test_a_rerun_after_the_merge_adds_nothing_and_keep_parts_keeps_them(fake_encoders, photos, tmp_path, capsys):
    out = tmp_path / "feats.h5"
    for i in range(2):
        assert _extract(photos, out, "--shard", f"{i}/2") == i
    assert main(["merge", str(out), "--quiet"]) == 0
    capsys.readouterr()
    for i in range(2):  # the same command again: every image is already in the merged store (the bad one retried)
        assert _extract(photos, out, "--shard", f"{i}/2") == i
    assert capsys.readouterr().out.count("0 images extracted") == 2
    assert main(["merge", str(out), "--keep-parts"]) == 0
    assert "(0 entries" in capsys.readouterr().out and len(list(tmp_path.glob("feats.part-*.h5"))) == 2
    assert _extract(photos, out, "--shard", "0/2", "--restart") == 0  # part 0 made again: same images
    assert main(["merge", str(out)]) == 0  # continued: images already there with the same features are skipped
    assert "already there" in capsys.readouterr().out and not list(tmp_path.glob("feats.part-*"))
    with open_feature_store(out) as store:
        assert len(store) == 7


def test_merge_refuses_missing_mixed_unfinished_and_foreign_parts(fake_encoders, photos, tmp_path, capsys):
    out = tmp_path / "feats.h5"
    assert _extract(photos, out, "--shard", "0/3") == 0
    capsys.readouterr()
    assert main(["merge", str(out)]) == 2
    assert "2 of 3 parts" in capsys.readouterr().err  # shards 1/3 and 2/3 missing
    assert _extract(photos, out, "--shard", "1/2") == 1
    assert main(["merge", str(out)]) == 2
    assert "different shard counts" in capsys.readouterr().err
    (tmp_path / "feats.part-000-of-003.h5").unlink()
    assert _extract(photos, out, "--shard", "0/2", "--encoder", "efficientnet-lite1") == 0
    capsys.readouterr()
    assert main(["merge", str(out)]) == 2
    err = capsys.readouterr().err
    assert "same extraction" in err and "efficientnet-lite1" in err and "--encoder" in err
    os.replace(tmp_path / "feats.part-000-of-002.h5", tmp_path / "feats.part-000-of-002.h5.partial")
    assert main(["merge", str(out)]) == 2
    assert "unfinished" in capsys.readouterr().err
    assert not out.exists()
    assert main(["merge", str(tmp_path / "feats.txt")]) == 2
    assert ".jsonl" in capsys.readouterr().err


@pytest.mark.parametrize("count", [2, 3])
def test_torchrun_ranks_extract_their_shards_and_rank0_merges(photos, tmp_path, count):
    one = tmp_path / "one.h5"
    out = tmp_path / "many" / "feats.h5"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    common = ["--images", str(photos), "--workers", "0", "--batch-size", "2", "--quiet"]
    single = subprocess.run([sys.executable, str(LAUNCHER), "extract", *common, "--out", str(one)],
                            check=False, capture_output=True, text=True, env=env, timeout=120)
    assert single.returncode == 1, single.stderr
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={count}",
                          str(LAUNCHER), "extract", *common, "--out", str(out)],
                         check=False, capture_output=True, text=True, env=env, timeout=180)
    assert run.returncode == 1, run.stdout + run.stderr  # rank 0 reports the bad photo of the whole job
    assert f"merged from {count} parts" in run.stdout
    assert _digest(out) == _digest(one)
    assert sorted(p.name for p in out.parent.iterdir()) == ["feats.h5", "feats.h5.errors.txt"]
