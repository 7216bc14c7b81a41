import pytest

from catcap.data.synthetic import make_world
from tiny_runs import tiny_run_overrides


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A small built-in world (120/30/30 images, 32-d features), made once per test session."""
    root = tmp_path_factory.mktemp("world") / "shapes"
    return make_world(root, num_train=120, num_val=30, num_test=30, seed=3, feature_dim=32, progress=False)


@pytest.fixture
def tiny_overrides():
    """overrides(world, out_dir, **extra): key=value list for a fast CPU run on ``tiny_world``."""
    return tiny_run_overrides
