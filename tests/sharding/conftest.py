"""Fixtures of the sharding tests: tiny photos (with one unreadable file) in a non-sorted dataset
order, the fake encoder of tests/features, and a tiny untrained checkpoint on a small world."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "features"))  # extract_fakes

from extract_fakes import FakeEncoder

PHOTO_IDS = [3000 + i for i in range(7)]


@pytest.fixture
def fake_encoders(monkeypatch):
    """extract_features(encoder=name) builds FakeEncoders (no EfficientNet weights needed)."""
    monkeypatch.setattr("catcap.features.extract.make_encoder", lambda name, backend="torch": FakeEncoder(name))


@pytest.fixture
def photos(tmp_path) -> Path:
    """Seven small photos ``<id>_x.png`` and one file that is not an image (``3999_bad.png``)."""
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    for i, image_id in enumerate(PHOTO_IDS):
        Image.new("RGB", (48 + i, 40), (30 * i, 100, 200 - 20 * i)).save(folder / f"{image_id}_x.png")
    (folder / "3999_bad.png").write_bytes(b"not an image")
    return folder


@pytest.fixture
def photo_dataset(tmp_path, photos) -> Path:
    """A Karpathy dataset of the photos in reverse id order (so the image list is not name order)."""
    names = [f"{i}_x.png" for i in reversed(PHOTO_IDS)] + ["3999_bad.png"]
    images = [{"filename": n, "imgid": int(n.split("_")[0]), "split": "train",
               "sentences": [{"raw": "a red square"}]} for n in names]
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps({"images": images}))
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """(checkpoint dir, world) of an untrained tiny model over a small world (7 test images)."""
    import torch

    from catcap.config import to_dict
    from catcap.data.synthetic import make_world
    from catcap.data.vocab import Vocab
    from catcap.models.config import ModelConfig
    from catcap.training.checkpoint import save_checkpoint
    from catcap.training.experiment import ExperimentConfig
    from catcap.training.setup import make_model

    root = tmp_path_factory.mktemp("shard-eval")
    world = make_world(root / "world", num_train=4, num_val=2, num_test=7, seed=1, feature_dim=8, progress=False)
    cfg = ExperimentConfig(model=ModelConfig(feature_dim=8, d_model=16, num_heads=2, encoder_layers=1,
                                             decoder_layers=1, d_ff=32))
    cfg.data.dataset, cfg.data.features = str(world.dataset), str(world.features)
    vocab = Vocab([f"w{i}" for i in range(30)])
    torch.manual_seed(0)
    model = make_model(cfg, vocab)
    return save_checkpoint(root / "ckpt", model=model, config=to_dict(cfg), vocab=vocab.to_dict()), world
