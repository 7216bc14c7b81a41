"""Feature stores: round trips, atomic writes, resume, and every refused input.

Oracle: the arrays each test writes itself (read back exactly, bit for bit) and hand-made
damaged files for the refusals."""

import json
import re

import h5py
import numpy as np
import pytest

from catcap.data.feature_base import meta_conflict
from catcap.data.features import (CHECKPOINT_WIDTH_ADVICE, FORMAT, FeatureStoreError, HDF5FeatureStore,
                                  HDF5FeatureWriter, ImageFeatures, NpzDirFeatureStore, NpzDirFeatureWriter,
                                  check_features, escape_key, open_feature_store, unescape_key)

F = 8
META = {"kind": "regions", "encoder": "test-encoder", "preprocessing": {"size": 128}}
KEYS = ["1", "42", "COCO_val2014_000000000042", "a/b c.d", "ünï%2F", ".", "-"]


def _arrays(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, key in enumerate(KEYS):
        n = 1 + i % 4
        regions = rng.normal(size=(n, F)).astype(np.float32)
        boxes = None if i % 3 == 0 else rng.uniform(size=(n, 4)).astype(np.float32)
        out[key] = (regions, boxes)
    return out


@pytest.fixture(params=["h5", "npz"])
def kind(request):
    return request.param


def _writer(kind, path, **kw):
    return (HDF5FeatureWriter if kind == "h5" else NpzDirFeatureWriter)(path, F, META, **kw)


def _path(tmp_path, kind):
    return tmp_path / ("feats.h5" if kind == "h5" else "feats")


def test_escape_key_round_trip():
    for key in KEYS:
        name = escape_key(key)
        assert unescape_key(name) == key
        assert "/" not in name and "." not in name and " " not in name
    assert escape_key("123") == "123"
    with pytest.raises(FeatureStoreError, match="non-empty strings"):
        escape_key(12)


def test_round_trip_bit_exact(tmp_path, kind):
    path, data = _path(tmp_path, kind), _arrays()
    with _writer(kind, path) as w:
        for key, (regions, boxes) in data.items():
            w.write(key, regions, boxes)
    assert path.exists() and not path.with_name(path.name + ".partial").exists()
    with open_feature_store(path) as store:
        assert isinstance(store, HDF5FeatureStore if kind == "h5" else NpzDirFeatureStore)
        assert store.feature_dim == F and store.meta == META
        assert sorted(store.keys()) == sorted(KEYS) and len(store) == len(KEYS)
        assert "42" in store and "43" not in store and 42 not in store
        for key, (regions, boxes) in data.items():
            got = store.get(key)
            assert isinstance(got, ImageFeatures) and got.regions.dtype == np.float32
            assert got.regions.tobytes() == regions.tobytes()
            if boxes is None:
                assert got.boxes is None
            else:
                assert got.boxes.dtype == np.float32 and got.boxes.tobytes() == boxes.tobytes()
        with pytest.raises(KeyError, match="not in the feature store"):
            store.get("nope")


def test_float64_input_is_cast(tmp_path, kind):
    path = _path(tmp_path, kind)
    with _writer(kind, path) as w:
        w.write("x", np.full((2, F), 0.1, dtype=np.float64), [[0, 0, 1, 1], [0, 0, 0.5, 0.5]])
    with open_feature_store(path) as store:
        assert store.get("x").regions.dtype == np.float32
        np.testing.assert_array_equal(store.get("x").regions, np.float32(0.1))


def test_exception_leaves_only_partial(tmp_path, kind):
    path = _path(tmp_path, kind)
    with pytest.raises(RuntimeError):
        with _writer(kind, path) as w:
            w.write("1", np.ones((1, F)))
            raise RuntimeError("crash in the middle")
    assert not path.exists()
    assert path.with_name(path.name + ".partial").exists()
    # without resume/overwrite the leftover is not silently discarded
    with pytest.raises(FileExistsError, match="interrupted run"):
        _writer(kind, path)
    with _writer(kind, path, overwrite=True) as w:
        assert w.written_keys() == set()
        w.write("2", np.ones((1, F)))
    with open_feature_store(path) as store:
        assert store.keys() == ["2"]


def test_resume_partial_and_final(tmp_path, kind):
    path, data = _path(tmp_path, kind), _arrays()
    with pytest.raises(RuntimeError):
        with _writer(kind, path) as w:
            w.write("1", *data["1"])
            w.write("42", *data["42"])
            raise RuntimeError
    with _writer(kind, path, resume=True) as w:
        assert w.written_keys() == {"1", "42"}
        with pytest.raises(FeatureStoreError, match="already written"):
            w.write("42", *data["42"])
        w.write("a/b c.d", *data["a/b c.d"])
    # the finished file can be resumed too
    with _writer(kind, path, resume=True) as w:
        assert w.written_keys() == {"1", "42", "a/b c.d"}
        w.write("-", *data["-"])
    with open_feature_store(path) as store:
        assert sorted(store.keys()) == sorted(["1", "42", "a/b c.d", "-"])
        assert store.get("42").regions.tobytes() == data["42"][0].tobytes()
        assert store.meta == META


def test_resume_refuses_other_width_or_meta(tmp_path, kind):
    path = _path(tmp_path, kind)
    with _writer(kind, path) as w:
        w.write("1", np.ones((1, F)))
    cls = HDF5FeatureWriter if kind == "h5" else NpzDirFeatureWriter
    with pytest.raises(FeatureStoreError, match="width 8, this writer was given 16"):
        cls(path, 16, META, resume=True)
    with pytest.raises(FeatureStoreError, match="mixing encoders"):
        cls(path.with_name(path.name), F, {"encoder": "other"}, resume=True)


def _partial(path):
    return path.with_name(path.name + ".partial")


def _finished(kind, path, keys=("1",)):
    with _writer(kind, path) as w:
        for key in keys:
            w.write(key, np.ones((1, F)))


@pytest.mark.parametrize("width, meta, match", [
    (16, META, "width 8, this writer was given 16"),
    (F, {**META, "encoder": "other"}, "encoder 'test-encoder', this run uses 'other'; mixing encoders"),
    (F, {**META, "preprocessing": {"size": 256}}, r"other settings \(preprocessing = \{'size': 128\} in the file"),
])
def test_refused_resume_puts_the_finished_file_back(tmp_path, kind, width, meta, match):
    path = _path(tmp_path, kind)
    _finished(kind, path)
    cls = HDF5FeatureWriter if kind == "h5" else NpzDirFeatureWriter
    with pytest.raises(FeatureStoreError, match=f"cannot resume {re.escape(str(path))}: .*{match}") as err:
        cls(path, width, meta, resume=True)
    assert "--restart" in str(err.value) and "another --out" in str(err.value)
    assert path.exists() and not _partial(path).exists()
    with open_feature_store(path) as store:
        assert store.keys() == ["1"] and store.meta == META


def test_exception_while_continuing_a_finished_file_keeps_its_name(tmp_path, kind):
    path = _path(tmp_path, kind)
    _finished(kind, path)
    with pytest.raises(RuntimeError):
        with _writer(kind, path, resume=True) as w:
            w.write("2", np.ones((1, F)))
            raise RuntimeError("crash in the middle")
    assert path.exists() and not _partial(path).exists()  # old images plus the ones completed
    with open_feature_store(path) as store:
        assert sorted(store.keys()) == ["1", "2"]


def _truncated_store(path):
    _finished("h5", path, keys=[str(i) for i in range(20)])
    return path.read_bytes()[:1500]


def _other_hdf5(path):
    with h5py.File(path, "w") as f:
        f.create_dataset("features", data=np.ones((3, 4)))
    return path.read_bytes()


@pytest.mark.parametrize("make, match", [
    (lambda p: b"plain text, not HDF5\n", r"found a 21-byte file that is not HDF5 \(it starts with b'plain"),
    (lambda p: b"", "found an empty file"),
    (_truncated_store, r"damaged HDF5 file \(.*truncated file"),
    (_other_hdf5, "an HDF5 file but not a catcap feature file"),
])
def test_a_file_that_cannot_be_continued_is_refused_untouched(tmp_path, make, match):
    path = tmp_path / "feats.h5"
    content = make(path)
    path.write_bytes(content)
    with pytest.raises(FeatureStoreError, match=match) as err:
        HDF5FeatureWriter(path, F, META, resume=True)
    assert "\n" not in str(err.value) and "--restart" in str(err.value)
    assert path.read_bytes() == content and not _partial(path).exists()


def test_discard_if_empty(tmp_path, kind):
    path = _path(tmp_path, kind)
    with _writer(kind, path) as w:  # a new file with nothing in it leaves nothing behind
        w.discard_if_empty()
    assert not path.exists() and not _partial(path).exists()
    _finished(kind, path, keys=())
    with _writer(kind, path, resume=True) as w:  # a finished file, even an empty one, is kept
        w.discard_if_empty()
    assert path.exists() and not _partial(path).exists()
    other = tmp_path / ("other.h5" if kind == "h5" else "other")
    with _writer(kind, other) as w:  # a .partial holding images is kept, to be continued
        w.write("1", np.ones((1, F)))
        w.discard_if_empty()
    assert not other.exists() and _partial(other).exists()


def test_meta_conflict_says_what_differs_briefly():
    assert meta_conflict(META, dict(META)) is None
    # a field newer writers record is no conflict when the file predates it (or the writer does not set it) ...
    assert meta_conflict(META, {**META, "keys": "image-id"}) is None
    assert meta_conflict({**META, "keys": "image-id"}, META) is None
    # ... but two different recorded values are
    msg = meta_conflict({**META, "keys": "file-stem"}, {**META, "keys": "image-id"})
    assert "keyed by file name (1000268201_693b08cb0e)" in msg and "by image id (--dataset" in msg
    msg = meta_conflict({**META, "a": 1, "b": 2, "c": 3, "d": "x" * 100}, META)
    assert "a = 1 in the file, None now" in msg and "(and 1 more)" in msg and "x" * 50 not in msg


def test_existing_final_needs_resume_or_overwrite(tmp_path, kind):
    path = _path(tmp_path, kind)
    with _writer(kind, path) as w:
        w.write("1", np.ones((1, F)))
    with pytest.raises(FileExistsError, match="resume=True"):
        _writer(kind, path)
    with _writer(kind, path, overwrite=True) as w:
        w.write("2", np.ones((1, F)))
    with open_feature_store(path) as store:
        assert store.keys() == ["2"]


@pytest.mark.parametrize("regions, boxes, match", [
    (np.ones((0, F)), None, r"shape \(N>=1, 8\)"),
    (np.ones((2, F + 1)), None, r"found \(2, 9\)"),
    (np.ones(F), None, r"found \(8,\)"),
    (np.ones((1, 1, F)), None, r"found \(1, 1, 8\)"),
    (np.array([[np.nan] * F]), None, "NaN/inf"),
    (np.array([[np.inf] * F]), None, "NaN/inf"),
    (np.array([["a"] * F]), None, "real numbers"),
    (np.ones((2, F)), np.ones((3, 4)), r"boxes of shape \(2, 4\)"),
    (np.ones((2, F)), np.ones((2, 5)), r"boxes of shape \(2, 4\)"),
    (np.ones((1, F)), np.array([[0, 0, np.nan, 1]]), "boxes hold NaN"),
])
def test_write_refuses_bad_input(tmp_path, kind, regions, boxes, match):
    with _writer(kind, _path(tmp_path, kind)) as w:
        with pytest.raises(FeatureStoreError, match=match) as err:
            w.write("img7", regions, boxes)
        assert "img7" in str(err.value)


def test_bad_constructor_arguments(tmp_path):
    with pytest.raises(FeatureStoreError, match="positive integer"):
        HDF5FeatureWriter(tmp_path / "a.h5", 0)
    with pytest.raises(TypeError):
        HDF5FeatureWriter(tmp_path / "b.h5", 4, {"x": object()})
    with HDF5FeatureWriter(tmp_path / "c.h5", 4) as w:
        with pytest.raises(FeatureStoreError, match="non-empty"):
            w.write("", np.ones((1, 4)))


def test_get_checks_values_of_a_tampered_file(tmp_path):
    path = tmp_path / "f.h5"
    good = np.arange(2 * F, dtype=np.float32).reshape(2, F) / 4  # distinct, exactly representable values
    with HDF5FeatureWriter(path, F) as w:
        w.write("good", good)
        w.write("bad", np.ones((1, F)))
        w.write("narrow", np.ones((1, F)))
    with h5py.File(path, "a") as f:
        f["images/bad/regions"][0, 3] = np.nan
        del f["images/narrow/regions"]
        f["images/narrow"].create_dataset("regions", data=np.ones((1, 3), np.float32))
    with HDF5FeatureStore(path) as store:
        item = store.get("good")  # the untouched image still reads back exactly as written
        assert item.regions.dtype == np.float32 and np.array_equal(item.regions, good)
        with pytest.raises(FeatureStoreError, match="'bad'.*NaN"):
            store.get("bad")
        with pytest.raises(FeatureStoreError, match=r"'narrow'.*\(1, 3\)"):
            store.get("narrow")


def test_reading_non_catcap_files(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("features", data=np.ones((3, 4)))
    with pytest.raises(FeatureStoreError, match=f"not a catcap feature file.*{FORMAT}.*features"):
        HDF5FeatureStore(other)
    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(FeatureStoreError, match="not an HDF5 file"):
        open_feature_store(text)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_feature_store(tmp_path / "missing.h5")
    with pytest.raises(FeatureStoreError, match=r"supported are HDF5 files \(\*\.h5, \*\.hdf5\)"):
        (tmp_path / "feats.lmdb").write_text("x")
        open_feature_store(tmp_path / "feats.lmdb")
    (tmp_path / "plain_dir").mkdir()
    with pytest.raises(FeatureStoreError, match="meta.json"):
        open_feature_store(tmp_path / "plain_dir")
    (tmp_path / "plain_dir" / "meta.json").write_text(json.dumps({"format": "x"}))
    with pytest.raises(FeatureStoreError, match="expected format"):
        open_feature_store(tmp_path / "plain_dir")


def test_npz_files_are_plain_and_pickle_free(tmp_path):
    path = tmp_path / "feats"
    with NpzDirFeatureWriter(path, F, META) as w:
        w.write("a/b", np.ones((2, F)), np.zeros((2, 4)))
    files = sorted(p.name for p in path.iterdir())
    assert files == ["a%2Fb.npz", "meta.json"]
    with np.load(path / "a%2Fb.npz", allow_pickle=False) as z:
        assert sorted(z.files) == ["boxes", "regions"]
    assert json.loads((path / "meta.json").read_text())["feature_dim"] == F


def test_check_features(tmp_path, kind):
    path = _path(tmp_path, kind)
    with _writer(kind, path) as w:
        for i in range(3):
            w.write(str(i), np.ones((1, F)))
    with open_feature_store(path) as store:
        check_features(store, ["0", "1", "2"], F)
        check_features(store, [0, 1])  # ints are compared as str(image_id)
        with pytest.raises(FeatureStoreError, match=r"width 8, the model expects 2048; set model.feature_dim=8"):
            check_features(store, ["0"], 2048)
        with pytest.raises(FeatureStoreError, match=r"encoder.dim=8"):
            check_features(store, ["0"], 4, config_key="encoder.dim")
        missing = [str(i) for i in range(3, 20)]
        with pytest.raises(FeatureStoreError, match=r"17 of 18 images.*first: \['3', '4', '5', '6', '7'\]"):
            check_features(store, ["0"] + missing, F)


STEMS = ["1000268201_693b08cb0e", "1001773457_577c3a7d70", "1002674143_1b742ab4b8", "1003163366_44323f5815"]


def test_check_features_shows_held_keys_and_suggests_the_key_scheme(tmp_path, kind):
    stems = _path(tmp_path, kind)
    _finished(kind, stems, keys=STEMS)
    with open_feature_store(stems) as store:
        with pytest.raises(FeatureStoreError, match=r"1 of 1 images.*the store holds 4 keys like "
                           r"\['1000268201_693b08cb0e', '1001773457_577c3a7d70', '1002674143_1b742ab4b8', \.\.\.\]; "
                           r"the store is keyed by file name but image ids are wanted: re-extract it with "
                           r"catcap extract --images DIR --dataset JSON"):
            check_features(store, ["1000268201"])
    ids = tmp_path / ("ids.h5" if kind == "h5" else "ids")
    _finished(kind, ids, keys=["1000268201", "1001773457"])
    with open_feature_store(ids) as store:
        with pytest.raises(FeatureStoreError, match=r"holds 2 keys like \['1000268201', '1001773457'\]; the store "
                           r"is keyed by image id .*look like file names"):
            check_features(store, ["1000268201_693b08cb0e"])
    empty = tmp_path / ("empty.h5" if kind == "h5" else "empty")
    _finished(kind, empty, keys=())
    with open_feature_store(empty) as store:
        with pytest.raises(FeatureStoreError, match="the store is empty; extract them"):
            check_features(store, ["1"])


def test_check_features_width_advice_for_a_checkpoint(tmp_path):
    path = tmp_path / "f.h5"
    _finished("h5", path)
    with open_feature_store(path) as store:
        with pytest.raises(FeatureStoreError, match="set model.feature_dim=8"):
            check_features(store, ["1"], 16)
        with pytest.raises(FeatureStoreError) as err:
            check_features(store, ["1"], 16, width_advice=CHECKPOINT_WIDTH_ADVICE)
    assert "width 8, the model expects 16; a trained checkpoint" in str(err.value)
    assert "feature_dim" not in str(err.value) and "--features" in str(err.value)


def test_hdf5_store_pickles_and_reopens_in_workers(tmp_path):
    """DataLoader workers get the store by pickle (spawn) or fork: each reopens the file."""
    import multiprocessing
    import pickle

    path = tmp_path / "f.h5"
    with HDF5FeatureWriter(path, F) as w:
        w.write("1", np.arange(F, dtype=np.float32)[None])
    with HDF5FeatureStore(path) as store:
        clone = pickle.loads(pickle.dumps(store))
        assert clone.feature_dim == F and clone.get("1").regions[0, 3] == 3
        clone.close()
        ctx = multiprocessing.get_context("fork")
        _FORKED["store"] = store  # inherited by fork, not pickled
        queue = ctx.Queue()
        proc = ctx.Process(target=_read_in_child, args=(queue,))
        proc.start()
        proc.join(30)
        assert queue.get(timeout=5) == 5.0 and proc.exitcode == 0
        assert store.get("1").regions[0, 5] == 5.0


_FORKED = {}


def _read_in_child(queue):
    store = _FORKED["store"]
    queue.put(float(store.get("1").regions[0, 5]))
    assert store._pid == __import__("os").getpid()
