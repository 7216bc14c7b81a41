import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

# The commands the tests run (subprocesses inherit this) keep one thread count: pacing threads to
# the machine's load (catcap/threads.py) would change a result's last bits with the load, and many
# tests compare two runs bit for bit. tests/unit/test_threads.py runs the pacing itself;
# CATCAP_THREADS=catcap runs the suite paced.
os.environ.setdefault("CATCAP_THREADS", "torch")
# Under pytest-xdist (`pytest -n N`) the N workers share the machine's cores: one intra-op thread
# each, for them and the commands they run, so that they do not oversubscribe the CPUs
# (docs/performance.md, "Threads on a shared CPU").
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

DATA = Path(__file__).parent / "metrics" / "data"

# The folders whose tests take longest (whole trainings, torchrun, the demo: 25-100 s each) run
# first, each module kept whole (its module fixtures are built once): on `pytest -n 2` the long
# tests then start early and the thousands of short ones fill in at the end, instead of one
# worker finishing a 100-s test while the other idles.
LONG_FIRST = ("e2e", "distributed", "mml", "reliability")


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        parts = item.path.relative_to(Path(__file__).parent).parts
        return LONG_FIRST.index(parts[0]) if len(parts) > 1 and parts[0] in LONG_FIRST else len(LONG_FIRST)

    items.sort(key=rank)  # stable: every module's tests stay together and in their order


@pytest.fixture(scope="session")
def coco_sample():
    """2,000 real COCO val2014 images with their 5-7 human captions each."""
    with gzip.open(DATA / "coco_val2000.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)["images"]


@pytest.fixture(scope="session")
def java_available():
    if shutil.which("java") is None:
        pytest.skip("no Java runtime on PATH (install e.g. openjdk-17-jre-headless to run this test)")
    return True
