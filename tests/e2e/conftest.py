import pytest

from catcap.data.synthetic import make_world


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A small built-in world (120/30/30 images, 32-d features), made once per test session."""
    root = tmp_path_factory.mktemp("world") / "shapes"
    return make_world(root, num_train=120, num_val=30, num_test=30, seed=3, feature_dim=32, progress=False)


@pytest.fixture
def tiny_overrides():
    """overrides(world, out_dir, **extra): key=value list for a fast CPU run on ``tiny_world``."""
    return _tiny_overrides


def _tiny_overrides(world, out_dir, **extra):
    items = {
        "data.dataset": world.dataset, "data.features": world.features, "data.min_count": 1,
        "model.feature_dim": 32, "model.d_model": 32, "model.num_heads": 2, "model.encoder_layers": 1,
        "model.decoder_layers": 2, "model.d_ff": 64, "out_dir": out_dir, "train.batch_size": 12,
        "train.epochs": 2, "train.schedule.warmup": 20, "train.progress": False, "train.log_every": 1,
    }
    items.update(extra)
    return [f"{k}={v}" for k, v in items.items()]
