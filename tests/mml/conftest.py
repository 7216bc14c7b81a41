import glob
from pathlib import Path

import pytest

from mml.build_data import build_shapes

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"


@pytest.fixture(scope="session")
def mml_data(tmp_path_factory):
    """A course-layout data folder built from a small shapes world (200 train / 40 val images)."""
    out = tmp_path_factory.mktemp("mml") / "coco_captioning"
    return build_shapes(out, num_train=200, num_val=40, seed=0, feature_dim=768, progress=False)


@pytest.fixture(scope="session")
def seed_notebook():
    """The teaching notebook's text, ../shared/seeds/001_*.txt (course material: read from there,
    never copied into the repository)."""
    found = sorted(glob.glob(str(SEEDS / "001_*.txt")))
    if not found:
        pytest.skip(f"the seed notebook was not found at {SEEDS}/001_*.txt; the notebook tests need it "
                    "(the project's ../shared folder)")
    return Path(found[0]).read_text(encoding="utf-8")
