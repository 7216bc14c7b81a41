"""Fixtures of the distributed / precision tests (helpers in ddp_helpers.py)."""

import pytest

from catcap.data.synthetic import make_world


@pytest.fixture(scope="session")
def dist_world(tmp_path_factory):
    """A small built-in world (120/30/30 images, 32-d features)."""
    root = tmp_path_factory.mktemp("dworld") / "shapes"
    return make_world(root, num_train=120, num_val=30, num_test=30, seed=3, feature_dim=32, progress=False)
