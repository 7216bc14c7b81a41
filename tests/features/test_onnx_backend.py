"""The ONNX Runtime path of catcap extract: same features as PyTorch, a checked cache, clear errors."""

import sys

import numpy as np
import pytest
import torch
from PIL import Image

from catcap.data.features import open_feature_store
from catcap.features import onnx_backend
from catcap.features.efficientnet import EncoderError
from catcap.features.extract import extract_features

pytest.importorskip("onnxruntime", reason='pip install "catcap[onnx]"')
pytest.importorskip("onnxscript", reason='pip install "catcap[onnx]"')


@pytest.fixture(scope="module")
def onnx_lite0(lite0, onnx_cache_root):
    return onnx_backend.OnnxImageEncoder("efficientnet-lite0", cache=onnx_cache_root / "onnx")


@pytest.fixture(scope="module")
def batch(flickr8k_images, lite0):
    paths = sorted(flickr8k_images.glob("*.jpg"))[:6]
    return torch.stack([lite0.preprocess(Image.open(p)) for p in paths])


def test_onnx_features_equal_pytorch_features_on_real_photos(onnx_lite0, lite0, batch):
    with torch.inference_mode():
        grid, pooled = lite0(batch)
    onnx_grid, onnx_pooled = onnx_lite0(batch)
    assert onnx_grid.shape == (6, 49, 1280) and onnx_pooled.shape == (6, 1280)
    assert float((onnx_grid - grid).abs().max()) < 1e-3
    assert float((onnx_pooled - pooled).abs().max()) < 1e-4
    assert float(grid.abs().max()) > 1.0  # real activations, not a trivial all-zero agreement
    assert onnx_lite0.max_difference < 1e-3 and onnx_lite0.meta == lite0.meta


def test_the_export_is_cached_and_reused(onnx_lite0):
    path = onnx_lite0.model_path
    assert path.exists() and path.suffix == ".onnx" and "efficientnet-lite0-torch" in path.name
    stamp = path.stat().st_mtime_ns
    again = onnx_backend.OnnxImageEncoder("efficientnet-lite0", cache=path.parent)
    assert again.model_path == path and path.stat().st_mtime_ns == stamp
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_model_that_disagrees_with_pytorch_is_refused(onnx_lite0, monkeypatch):
    monkeypatch.setattr(onnx_backend, "CHECK_TOLERANCE", onnx_lite0.max_difference / 2)
    with pytest.raises(EncoderError, match="differ from PyTorch's.*delete the file"):
        onnx_backend.OnnxImageEncoder("efficientnet-lite0", cache=onnx_lite0.model_path.parent)


def test_extract_with_onnx_then_continue_with_torch(flickr8k_images, onnx_lite0, lite0, tmp_path):
    paths = sorted(flickr8k_images.glob("*.jpg"))[:5]
    out = tmp_path / "f.h5"
    first = extract_features(paths[:3], out, onnx_lite0, batch_size=2, workers=0, progress=False)
    rest = extract_features(paths, out, lite0, batch_size=2, workers=0, progress=False)
    assert (first.extracted, rest.extracted, rest.skipped) == (3, 2, 3)
    torch_only = extract_features(paths, tmp_path / "t.h5", lite0, workers=0, progress=False)
    assert torch_only.extracted == 5
    with open_feature_store(out) as mixed, open_feature_store(tmp_path / "t.h5") as ref:
        assert sorted(mixed.keys()) == sorted(ref.keys())
        for key in ref.keys():
            assert np.abs(mixed.get(key).regions - ref.get(key).regions).max() < 1e-3


def test_backend_errors_say_what_to_do(flickr8k_images, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown backend 'tensorrt'.*--backend onnx"):
        extract_features(flickr8k_images, tmp_path / "f.h5", backend="tensorrt", progress=False)
    assert not (tmp_path / "f.h5").exists()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    with pytest.raises(EncoderError, match=r'pip install "catcap\[onnx\]"'):
        onnx_backend.make_encoder("efficientnet-lite0", "onnx")
