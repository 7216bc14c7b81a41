"""The course's data folder: what the builder writes, what load_coco_data reads, images, gradients."""

import json
import os

import h5py
import numpy as np
import pytest
from PIL import Image

from mml.build_data import build_from_karpathy, main, pca_fit
from mml.coco_utils import decode_captions, load_coco_data, sample_coco_minibatch
from mml.gradient_check import eval_numerical_gradient, eval_numerical_gradient_array, rel_error
from mml.image_utils import image_from_url
from mml.paths import data_dir


def test_built_folder_has_the_course_layout(mml_data):
    names = sorted(p.name for p in mml_data.iterdir())
    assert names == ["coco2014_captions.h5", "coco2014_vocab.json", "images", "info.json",
                     "train2014_urls.txt", "train2014_vgg16_fc7.h5", "train2014_vgg16_fc7_pca.h5",
                     "val2014_urls.txt", "val2014_vgg16_fc7.h5", "val2014_vgg16_fc7_pca.h5"]
    vocab = json.loads((mml_data / "coco2014_vocab.json").read_text())
    assert vocab["idx_to_word"][:4] == ["<NULL>", "<START>", "<END>", "<UNK>"]
    assert all(vocab["word_to_idx"][w] == i for i, w in enumerate(vocab["idx_to_word"]))
    with h5py.File(mml_data / "coco2014_captions.h5") as f:
        assert sorted(f) == ["train_captions", "train_image_idxs", "val_captions", "val_image_idxs"]
        caps = f["train_captions"][()]
        assert caps.dtype == np.int32 and caps.shape[1] == 17
    assert (caps[:, 0] == 1).all() and ((caps == 2).sum(axis=1) == 1).all()
    ends = (caps == 2).argmax(axis=1)
    assert all((row[end + 1:] == 0).all() and (row[1:end] > 2).all() for row, end in zip(caps, ends))
    info = json.loads((mml_data / "info.json").read_text())
    assert info["pca_dim"] == 512 and info["feature_dim"] == 768 and info["splits"]["train"]["images"] == 200


def test_load_coco_data_reads_the_folder(mml_data):
    data = load_coco_data(mml_data)
    assert data["train_features"].shape == (200, 512) and data["val_features"].shape == (40, 512)
    assert data["train_image_idxs"].max() < 200 and len(data["train_urls"]) == 200
    assert os.path.isfile(data["val_urls"][0])                      # relative lines -> absolute paths
    raw = load_coco_data(mml_data, pca_features=False)
    assert raw["train_features"].shape == (200, 768)
    centred = raw["train_features"] - raw["train_features"].mean(axis=0)
    variance = (data["train_features"] ** 2).sum() / (centred ** 2).sum()
    assert variance == pytest.approx(1.0, rel=1e-3)                 # 512 directions keep it all (200 images)
    np.random.seed(0)
    small = load_coco_data(mml_data, max_train=50)
    assert small["train_captions"].shape == (50, 17) and small["val_captions"].shape == data["val_captions"].shape


def test_load_coco_data_uses_mml_data_dir_and_explains_a_missing_folder(mml_data, tmp_path, monkeypatch):
    monkeypatch.setenv("MML_DATA_DIR", str(mml_data))
    assert data_dir() == mml_data and load_coco_data()["train_features"].shape[0] == 200
    monkeypatch.setenv("MML_DATA_DIR", str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match=r"python -m mml\.build_data"):
        load_coco_data()
    monkeypatch.delenv("MML_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data_dir() == tmp_path / "catcap" / "mml" / "coco_captioning"


def test_minibatch_and_decoding(mml_data):
    data = load_coco_data(mml_data)
    np.random.seed(1)
    captions, features, urls = sample_coco_minibatch(data, batch_size=7, split="val")
    assert captions.shape == (7, 17) and features.shape == (7, 512) and urls.shape == (7,)
    words = data["idx_to_word"]
    text = decode_captions(captions, words)
    assert len(text) == 7 and all(t.startswith("<START> ") and t.endswith(" <END>") for t in text)
    assert decode_captions(np.array([1, 5, 2, 0, 7]), words) == f"<START> {words[5]} <END>"
    with pytest.raises(ValueError, match="no split 'test'"):
        sample_coco_minibatch(data, split="test")


def test_builder_refuses_to_overwrite_and_drops_long_captions(mml_data, tmp_path):
    world = tmp_path / "w"
    from catcap.data.synthetic import make_world
    paths = make_world(world, num_train=20, num_val=5, num_test=0, seed=1, feature_dim=16, progress=False)
    out = build_from_karpathy(paths.dataset, paths.features, tmp_path / "out", image_root=paths.root, max_words=6)
    info = json.loads((out / "info.json").read_text())
    assert info["pca_dim"] == 16 and info["splits"]["train"]["dropped_long"] > 0
    with h5py.File(out / "coco2014_captions.h5") as f:
        assert f["train_captions"].shape[1] == 8
    with pytest.raises(FileExistsError, match="--overwrite"):
        build_from_karpathy(paths.dataset, paths.features, out)
    with pytest.raises(FileNotFoundError, match="no features"):
        other = make_world(tmp_path / "w2", num_train=30, num_val=1, num_test=0, seed=2, feature_dim=16, progress=False)
        build_from_karpathy(other.dataset, paths.features, tmp_path / "out2")
    assert main(["--out", str(tmp_path / "cli"), "--train", "6", "--val", "2", "--feature-dim", "8"]) == 0
    assert load_coco_data(tmp_path / "cli")["train_features"].shape == (6, 8)


def test_pca_directions_are_orthonormal_with_few_images():
    x = np.random.default_rng(0).normal(size=(5, 12))
    mean, comps = pca_fit(x, 8)
    assert comps.shape == (8, 12)
    np.testing.assert_allclose(comps @ comps.T, np.eye(8), atol=1e-10)
    np.testing.assert_allclose(mean, x.mean(axis=0))


def test_image_from_url_reads_local_files_and_never_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("MML_OFFLINE", "1")
    monkeypatch.setenv("MML_DATA_DIR", str(tmp_path))
    (tmp_path / "images").mkdir()
    Image.fromarray(np.full((4, 5, 3), 200, np.uint8)).save(tmp_path / "images" / "a.png")
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    assert image_from_url(str(tmp_path / "images" / "a.png")).shape == (4, 5, 3)
    assert image_from_url((tmp_path / "images" / "a.png").as_uri()).shape == (4, 5, 3)
    assert image_from_url("http://images.example.org/x/a.png").shape == (4, 5, 3)   # local copy
    for bad in ["http://images.example.org/missing.jpg", str(tmp_path / "nope.png"),
                str(tmp_path / "broken.jpg"), "", None, 12]:
        assert image_from_url(bad) is None


def test_gradient_check_helpers():
    x = np.random.default_rng(0).normal(size=(3, 4))
    grad = eval_numerical_gradient(lambda v: float((v ** 3).sum()), x, verbose=False)
    assert rel_error(grad, 3 * x ** 2) < 1e-7
    w = np.random.default_rng(1).normal(size=(4, 2))
    df = np.random.default_rng(2).normal(size=(3, 2))
    assert rel_error(eval_numerical_gradient_array(lambda v: v @ w, x, df), df @ w.T) < 1e-7
    with pytest.raises(TypeError, match="float NumPy array"):
        eval_numerical_gradient(lambda v: 0.0, np.arange(3))
