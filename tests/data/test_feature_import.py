"""Importing bottom-up TSV, npy/npz folders, M2 HDF5 and LMDB features into the catcap store."""

import base64
import io

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
