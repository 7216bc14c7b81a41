"""Importing bottom-up TSV, npy/npz folders, M2 HDF5 and LMDB features into the catcap store."""

import base64
import io
import re

import h5py
import numpy as np
import pytest

from catcap.data.feature_base import FeatureStoreError
from catcap.data.feature_import import import_features
from catcap.data.features import open_feature_store

RNG = np.random.default_rng(0)
IMAGES = {"11": (RNG.random((3, 6), dtype=np.float32), RNG.random((3, 4), dtype=np.float32) * 100),
          "42": (RNG.random((5, 6), dtype=np.float32), RNG.random((5, 4), dtype=np.float32) * 100)}


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a, dtype=np.float32).tobytes()).decode("ascii")


def check_store(path, with_boxes=True):
    with open_feature_store(path) as store:
        assert sorted(store.keys()) == ["11", "42"] and store.feature_dim == 6
        for key, (feats, boxes) in IMAGES.items():
            got = store.get(key)
            np.testing.assert_array_equal(got.regions, feats)
            if with_boxes:
                np.testing.assert_array_equal(got.boxes, boxes)


def test_bottom_up_tsv(tmp_path):
    tsv = tmp_path / "feats.tsv"
    tsv.write_text("".join(f"{k}\t640\t480\t{len(f)}\t{b64(b)}\t{b64(f)}\n" for k, (f, b) in IMAGES.items()))
    report = import_features("tsv", tsv, tmp_path / "out.h5", progress=False)
    assert report == {"written": 2, "skipped": 0, "feature_dim": 6, "out": str(tmp_path / "out.h5")}
    check_store(tmp_path / "out.h5")
    again = import_features("tsv", tsv, tmp_path / "out.h5", progress=False)  # resumable: nothing to redo
    assert again["written"] == 0 and again["skipped"] == 2
    bad = tmp_path / "bad.tsv"
    bad.write_text("11\t640\t480\t3\tnot-base64!\tzz\n")
    with pytest.raises(FeatureStoreError, match=r"bad.tsv:1: cannot decode image '11'"):
        import_features("tsv", bad, tmp_path / "bad.h5", progress=False)


def test_npy_and_npz_folder_with_boxes_dir(tmp_path):
    feats_dir, boxes_dir = tmp_path / "att", tmp_path / "box"
    feats_dir.mkdir(), boxes_dir.mkdir()
    np.savez(feats_dir / "11.npz", feat=IMAGES["11"][0])
    np.save(feats_dir / "42.npy", IMAGES["42"][0])
    for k, (_, b) in IMAGES.items():
        np.save(boxes_dir / f"{k}.npy", b)
    import_features("npy", feats_dir, tmp_path / "out.h5", boxes_dir=boxes_dir, progress=False)
    check_store(tmp_path / "out.h5")
    np.save(feats_dir / "99.npy", np.array([{"a": 1}], dtype=object))
    with pytest.raises(FeatureStoreError, match="pickled arrays are never loaded"):
        import_features("npy", feats_dir, tmp_path / "again.h5", progress=False)


def test_m2_hdf5(tmp_path):
    with h5py.File(tmp_path / "m2.hdf5", "w") as f:
        for k, (feats, boxes) in IMAGES.items():
            f[f"{k}_features"], f[f"{k}_boxes"] = feats, boxes
            f[f"{k}_cls_prob"] = np.zeros((len(feats), 1601), dtype=np.float32)
    import_features("m2", tmp_path / "m2.hdf5", tmp_path / "out.h5", progress=False)
    check_store(tmp_path / "out.h5")


def test_lmdb_of_npz_bytes(tmp_path):
    lmdb = pytest.importorskip("lmdb", reason="the lmdb package is not installed (pip install lmdb)")
    env = lmdb.open(str(tmp_path / "feats.lmdb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for k, (feats, boxes) in IMAGES.items():
            buf = io.BytesIO()
            np.savez(buf, feat=feats, boxes=boxes)
            txn.put(k.encode(), buf.getvalue())
    env.close()
    import_features("lmdb", tmp_path / "feats.lmdb", tmp_path / "out.h5", progress=False)
    check_store(tmp_path / "out.h5")


def test_unknown_format(tmp_path):
    with pytest.raises(FeatureStoreError, match="unknown feature format 'pkl'; choose one of tsv, npy, m2, lmdb"):
        import_features("pkl", tmp_path, tmp_path / "out.h5")


def test_cli_imports_and_reports(tmp_path):
    import subprocess
    import sys

    with h5py.File(tmp_path / "m2.hdf5", "w") as f:
        for k, (feats, boxes) in IMAGES.items():
            f[f"{k}_features"] = feats
    proc = subprocess.run([sys.executable, "-m", "catcap", "import", "features", "--format", "m2", "--source",
                           str(tmp_path / "m2.hdf5"), "--out", str(tmp_path / "out.h5")], capture_output=True, text=True)
    assert proc.returncode == 0 and "wrote 2 images (6-d features)" in proc.stdout, proc.stderr
    check_store(tmp_path / "out.h5", with_boxes=False)


def _cli(*argv):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "catcap", "import", "features", *map(str, argv)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("fmt, make, match", [
    ("lmdb", lambda p: p.mkdir(), r"folder without data\.mdb, so not an LMDB database; --format lmdb expects"),
    ("lmdb", None, r"does not exist; --format lmdb expects an LMDB database"),
    ("npy", None, r"does not exist; --format npy expects a folder of <image_id>\.npy"),
    ("npy", lambda p: p.write_text("x"), r"is a file, not a folder; --format npy expects"),
    ("npy", lambda p: (p.mkdir(), (p / "a.txt").write_text("x")), r"holds no \.npy or \.npz files"),
    ("m2", lambda p: p.write_text("not hdf5"), r"is not an HDF5 file; --format m2 expects the M2 Transformer's"),
    ("m2", lambda p: p.mkdir(), r"is a folder; --format m2 expects"),
    ("tsv", None, r"does not exist; --format tsv expects bottom-up attention TSV"),
    ("tsv", lambda p: p.write_bytes(b"\xff\xfe\x00binary"), r"not a text TSV file"),
])
def test_bad_sources_are_refused_up_front_with_the_expected_layout(tmp_path, fmt, make, match):
    source, out = tmp_path / "source", tmp_path / "out.h5"
    if make:
        make(source)
    with pytest.raises((FeatureStoreError, FileNotFoundError), match=match):
        import_features(fmt, source, out, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["source"] if make else [])  # nothing written
    proc = _cli("--format", fmt, "--source", source, "--out", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("catcap import: error: ") and re.search(match, proc.stderr), proc.stderr


def test_a_file_that_is_not_an_lmdb_is_a_message(tmp_path):
    pytest.importorskip("lmdb", reason="the lmdb package is not installed (pip install lmdb)")
    (tmp_path / "feats.mdb").write_text("not an lmdb")
    with pytest.raises(FeatureStoreError, match=r"cannot open .*feats\.mdb as LMDB .*expected an LMDB database"):
        import_features("lmdb", tmp_path / "feats.mdb", tmp_path / "out.h5", progress=False)
    assert not (tmp_path / "out.h5").exists()


def test_out_folder_source_as_out_and_extra_sources_are_refused(tmp_path):
    with h5py.File(tmp_path / "m2.hdf5", "w") as f:
        for k, (feats, boxes) in IMAGES.items():
            f[f"{k}_features"] = feats
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "keep.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(FeatureStoreError, match="is a folder; expected the path of an HDF5 feature file"):
            import_features("m2", tmp_path / "m2.hdf5", tmp_path / "outdir", progress=False, overwrite=overwrite)
    assert (tmp_path / "outdir" / "keep.txt").read_text() == "mine"
    with pytest.raises(FeatureStoreError, match="is the source itself"):
        import_features("m2", tmp_path / "m2.hdf5", tmp_path / "m2.hdf5", progress=False, overwrite=True)
    proc = _cli("--format", "m2", "--source", tmp_path / "m2.hdf5", tmp_path / "other.hdf5", "--out", tmp_path / "o.h5")
    assert proc.returncode == 2 and "--format m2 reads one source, found 2" in proc.stderr, proc.stderr
    proc = _cli("--format", "m2", "--source", tmp_path / "m2.hdf5", "--boxes", tmp_path, "--out", tmp_path / "o.h5")
    assert proc.returncode == 2 and "--boxes (boxes_dir) is read with --format npy only" in proc.stderr, proc.stderr


def test_restart_replaces_a_store_that_cannot_be_resumed(tmp_path):
    """The resume-conflict message advises --restart; the flag exists and replaces --out."""
    out = tmp_path / "out.h5"
    with h5py.File(tmp_path / "m2.hdf5", "w") as f:
        for k, (feats, boxes) in IMAGES.items():
            f[f"{k}_features"], f[f"{k}_boxes"] = feats, boxes
    feats_dir = tmp_path / "att"
    feats_dir.mkdir()
    np.save(feats_dir / "7.npy", RNG.random((2, 9), dtype=np.float32))  # another source, another width
    assert _cli("--format", "m2", "--source", tmp_path / "m2.hdf5", "--out", out).returncode == 0
    before = out.read_bytes()
    proc = _cli("--format", "npy", "--source", feats_dir, "--out", out)
    assert proc.returncode == 2 and "cannot resume" in proc.stderr and "--restart" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and out.read_bytes() == before  # refused: the store is untouched
    proc = _cli("--format", "npy", "--source", feats_dir, "--out", out, "--restart")
    assert proc.returncode == 0 and "wrote 1 images (9-d features)" in proc.stdout, proc.stderr
    with open_feature_store(out) as store:
        assert sorted(store.keys()) == ["7"] and store.feature_dim == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["att", "m2.hdf5", "out.h5"]  # no .partial left
    proc = _cli("--format", "m2", "--source", tmp_path / "m2.hdf5", "--out", out, "--restart")
    assert proc.returncode == 0 and "wrote 2 images" in proc.stdout, proc.stderr
    check_store(out)
