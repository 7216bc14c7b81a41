"""Fixtures of the reliability suite (docs/reliability.md): a very small shapes world, and the
switch between the normal suite's subset of fault runs and all of them. The helpers (subprocess
runners with a fault armed, the half-written-file check) are in reliability_helpers.py."""

import os

import pytest

from catcap.data.synthetic import make_world

ALL_FAULTS = "CATCAP_ALL_FAULTS"


def pytest_collection_modifyitems(config, items):
    """Cases marked ``all_faults`` run only with CATCAP_ALL_FAULTS=1 (`make test-slow`): the normal
    suite runs a representative subset of the kill/disk-full runs (docs/reliability.md)."""
    if os.environ.get(ALL_FAULTS) == "1":
        return
    skip = pytest.mark.skip(reason=f"one of the full fault runs: `make test-slow` (or {ALL_FAULTS}=1) runs it")
    for item in items:
        if "all_faults" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def fault_world(tmp_path_factory):
    """40/10/10 images, 32-d features: 17 training batches of 12 captions per epoch."""
    root = tmp_path_factory.mktemp("fault-world") / "shapes"
    return make_world(root, num_train=40, num_val=10, num_test=10, seed=5, feature_dim=32, progress=False)
