import random

import numpy as np
import pytest
import torch

from catcap.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def trainer_state(model):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return opt, {
        "optimizer": opt.state_dict(),
        "step": 7,
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": list(np.random.get_state()[1][:5].tolist()),
        "python_rng": random.getstate(),
        "best": None,
    }


def test_roundtrip_restores_weights_optimizer_and_rng(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt, state = trainer_state(model)
    save_checkpoint(tmp_path / "ckpt", model=model, config={"a": 1}, vocab={"words": ["x"]}, trainer=state)
    back = load_checkpoint(tmp_path / "ckpt", with_trainer=True)
    assert back["config"] == {"a": 1} and back["vocab"] == {"words": ["x"]}
    for k, v in model.state_dict().items():
        assert torch.equal(back["weights"][k], v)
    opt2 = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    opt2.load_state_dict(back["trainer"]["optimizer"])
    m1, m2 = opt.state_dict()["state"][0]["exp_avg"], opt2.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(m1, m2)
    assert torch.equal(back["trainer"]["torch_rng"], state["torch_rng"])
    assert back["trainer"]["python_rng"] == state["python_rng"]
    assert back["trainer"]["step"] == 7 and back["trainer"]["best"] is None


def test_overwrite_is_atomic_and_no_temp_dirs_remain(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 1}, vocab={})
    save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 2}, vocab={})
    assert load_checkpoint(tmp_path / "ckpt")["config"] == {"v": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 1}, vocab={})
    with pytest.raises(TypeError, match="cannot save a object"):
        save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 2}, vocab={}, trainer={"bad": object()})
    assert load_checkpoint(tmp_path / "ckpt")["config"] == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_crash_between_renames_is_recovered(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 1}, vocab={})
    (tmp_path / "ckpt").rename(tmp_path / ".ckpt.old")  # what a kill right after the first rename leaves
    assert load_checkpoint(tmp_path / "ckpt")["config"] == {"v": 1}


def test_incomplete_directory_is_a_clear_error(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(CheckpointError, match="missing model.safetensors, config.json, vocab.json"):
        load_checkpoint(tmp_path / "x")


def test_a_run_folder_or_a_missing_folder_says_which_checkpoint_was_meant(tmp_path):
    save_checkpoint(tmp_path / "run" / "best", model=torch.nn.Linear(3, 2), config={}, vocab={})
    save_checkpoint(tmp_path / "run" / "last", model=torch.nn.Linear(3, 2), config={}, vocab={})
    with pytest.raises(CheckpointError, match=r"training run's folder, not a checkpoint; its checkpoints are "
                                              r".*run/best and .*run/last"):
        load_checkpoint(tmp_path / "run")
    with pytest.raises(CheckpointError, match=r"no checkpoint at .*nope: the folder does not exist"):
        load_checkpoint(tmp_path / "nope")


def test_the_working_folder_of_the_run_is_recorded(tmp_path):
    save_checkpoint(tmp_path / "c", model=torch.nn.Linear(3, 2), config={}, vocab={}, workdir="/some/where")
    assert load_checkpoint(tmp_path / "c")["workdir"] == "/some/where"
    save_checkpoint(tmp_path / "d", model=torch.nn.Linear(3, 2), config={}, vocab={})
    assert load_checkpoint(tmp_path / "d")["workdir"] is None


def test_checkpoint_permissions_follow_the_umask(tmp_path):
    """Not tempfile.mkdtemp's private 0o700: a checkpoint is readable like any folder the user makes."""
    import os
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    save_checkpoint(tmp_path / "ckpt", model=torch.nn.Linear(3, 2), config={}, vocab={}, trainer={"step": 1})
    assert stat.S_IMODE((tmp_path / "ckpt").stat().st_mode) == 0o777 & ~mask
    for f in (tmp_path / "ckpt").iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~mask, f.name
