"""train.compile=true: the XE forward through torch.compile (inductor) gives the eager run's losses."""

import json
import shutil

import pytest

from ddp_helpers import catcap_train, tiny_args


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile's CPU backend needs a C compiler")
def test_compiled_training_matches_eager(dist_world, tmp_path):
    extra = {"model.dropout": 0, "train.max_steps": 4}
    catcap_train(tiny_args(dist_world, tmp_path / "eager", **extra))
    catcap_train(tiny_args(dist_world, tmp_path / "compiled", **extra, **{"train.compile": "true"}), timeout=600)
    losses = [[json.loads(line)["xe"] for line in (tmp_path / run / "log.jsonl").read_text().splitlines()]
              for run in ("eager", "compiled")]
    assert len(losses[0]) == 4
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
