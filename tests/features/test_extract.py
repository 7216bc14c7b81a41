"""extract_features on real Flickr8k photos: shapes, boxes, metadata, resume, corrupt files."""

import shutil

import pytest

from catcap.data.features import open_feature_store
from catcap.features.extract import extract_features, read_errors


@pytest.fixture(scope="module")
def photos(flickr8k_images, tmp_path_factory):
    """12 real photos plus one corrupt .jpg in a folder of their own."""
    folder = tmp_path_factory.mktemp("photos")
    for path in sorted(flickr8k_images.glob("*.jpg"))[:12]:
        shutil.copy(path, folder / path.name)
    (folder / "0_corrupt.jpg").write_bytes(b"\xff\xd8\xff this is not a JPEG" * 10)
    return folder


def test_extract_resume_and_corrupt(photos, lite0, tmp_path):
    out = tmp_path / "feats.h5"
    first = extract_features(photos, out, lite0, batch_size=5, workers=1, progress=False)
    assert first.extracted == 12 and first.skipped == 0
    assert [p for p, _ in first.errors] == [str(photos / "0_corrupt.jpg")]
    assert read_errors(out)[0][0] == str(photos / "0_corrupt.jpg")
    with open_feature_store(out) as store:
        assert len(store) == 12 and store.feature_dim == 1280 and "0_corrupt" not in store
        assert store.meta["encoder"] == "efficientnet-lite0" and store.meta["input_size"] == 224
        assert store.meta["preprocess"]["mean_rgb"] == 127.0 and store.meta["grid"] == [7, 7]
        assert store.meta["keys"] == "file-stem"
        for key in store.keys():
            feats = store.get(key)
            assert feats.regions.shape == (49, 1280) and feats.boxes.shape == (49, 4)
            assert (feats.boxes >= 0).all() and (feats.boxes <= 224).all()  # these photos are 224x224
            assert (feats.regions >= 0).all() and (feats.regions <= 6).all()  # ReLU6 outputs

    again = extract_features(photos, out, lite0, workers=0, progress=False)
    assert again.extracted == 0 and again.skipped == 12 and len(again.errors) == 1


def test_interrupted_run_continues(photos, lite0, tmp_path):
    out = tmp_path / "feats.h5"
    part = extract_features(photos, out, lite0, workers=0, progress=False, limit=4)
    assert part.extracted == 3 and len(part.errors) == 1  # the corrupt file sorts first
    rest = extract_features(photos, out, lite0, workers=0, progress=False)
    assert rest.extracted == 9 and rest.skipped == 3
    with pytest.raises(FileExistsError, match="resume=True"):
        extract_features(photos, out, lite0, workers=0, progress=False, resume=False)


def test_refuses_bad_arguments(photos, tmp_path):
    with pytest.raises(ValueError, match=r"\.h5"):
        extract_features(photos, tmp_path / "feats.npz", progress=False)
    with pytest.raises(ValueError, match="unknown image encoder"):
        extract_features(photos, tmp_path / "f.h5", "resnet50", progress=False)
    with pytest.raises(FileNotFoundError, match="image folder"):
        extract_features(tmp_path / "missing", tmp_path / "f.h5", progress=False)
