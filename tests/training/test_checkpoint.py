"""Checkpoints: round trips, atomic replacement, and damaged folders refused with a clear error.

Oracles: the values saved (weights, optimizer moments, the next random draws of every RNG
recorded before saving) must come back exactly; damaged files are made by hand (cut short,
wrong JSON) and the error must name the file and say what is wrong."""

import json
import random

import numpy as np
import pytest
import torch

from catcap.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from catcap.training.rng import restore_rng, rng_state


def trainer_state(model):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return opt, {
        "optimizer": opt.state_dict(),
        "step": 7,
        "rng": rng_state(),  # torch, numpy and Python generators, as the trainer saves them
        "best": None,
    }


def next_draws() -> tuple:
    """The next few numbers of the torch, numpy and Python global generators (consumes them)."""
    return (torch.rand(3).tolist(), np.random.rand(3).tolist(), np.random.randn(2).tolist(),
            [random.random() for _ in range(3)])


def test_roundtrip_restores_weights_optimizer_and_rng(tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    np.random.randn()  # a cached Gaussian (has_gauss = 1) is part of numpy's state too
    random.seed(0)
    model = torch.nn.Linear(3, 2)
    opt, state = trainer_state(model)
    expected = next_draws()  # what every generator gives right after the saved state
    save_checkpoint(tmp_path / "ckpt", model=model, config={"a": 1}, vocab={"words": ["x"]}, trainer=state)
    back = load_checkpoint(tmp_path / "ckpt", with_trainer=True)
    assert back["config"] == {"a": 1} and back["vocab"] == {"words": ["x"]}
    for k, v in model.state_dict().items():
        assert torch.equal(back["weights"][k], v)
    opt2 = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    opt2.load_state_dict(back["trainer"]["optimizer"])
    m1, m2 = opt.state_dict()["state"][0]["exp_avg"], opt2.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(m1, m2)
    next_draws()  # move every generator on, so that only a real restore gives `expected` again
    restore_rng(back["trainer"]["rng"])
    assert next_draws() == expected
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


@pytest.fixture
def saved(tmp_path):
    """A complete checkpoint with trainer state."""
    model = torch.nn.Linear(30, 20)
    return save_checkpoint(tmp_path / "ckpt", model=model, config={"v": 1}, vocab={"tokens": ["<pad>"]},
                           trainer={"optimizer": {"x": torch.ones(50)}, "step": 3})


@pytest.mark.parametrize("content, message", [
    ("[1, 2]", r"expected format catcap-checkpoint-v1, found 'a JSON list'"),
    ('{"format": "something-else", "config": {}}', r"expected format catcap-checkpoint-v1, found 'something-else'"),
    ('{"config": {}}', r"expected format catcap-checkpoint-v1, found None"),
    ('{"format": "catcap-checkpoint-v1"}', r"expected the experiment config under \"config\", found NoneType"),
    ('{"format": "catcap-checkpoint-v1", "config": {', r"not readable JSON .*the checkpoint is damaged"),
])
def test_a_config_json_of_the_wrong_format_is_refused_by_name(saved, content, message):
    (saved / "config.json").write_text(content)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(saved)
    assert str(saved / "config.json") in str(info.value)


@pytest.mark.parametrize("name", ["model.safetensors", "trainer.safetensors"])
@pytest.mark.parametrize("keep", [0.5, 0.99, 5 / 1000])
def test_a_truncated_safetensors_file_is_refused_by_name(saved, name, keep):
    """A file cut short (an interrupted copy): the header or the tensors are incomplete."""
    data = (saved / name).read_bytes()
    (saved / name).write_bytes(data[:max(1, int(len(data) * keep))])
    with pytest.raises(CheckpointError, match=r"not a complete safetensors file .*the checkpoint is damaged") as info:
        load_checkpoint(saved, with_trainer=True)
    assert str(saved / name) in str(info.value)


def test_a_damaged_vocab_or_trainer_json_is_refused_by_name(saved):
    for name in ("vocab.json", "trainer.json"):
        good = (saved / name).read_text()
        (saved / name).write_text(good[: len(good) // 2])
        with pytest.raises(CheckpointError, match=r"not readable JSON") as info:
            load_checkpoint(saved, with_trainer=True)
        assert str(saved / name) in str(info.value)
        (saved / name).write_text(good)
    assert load_checkpoint(saved, with_trainer=True)["trainer"]["step"] == 3  # repaired: loads again
    assert json.loads((saved / "config.json").read_text())["config"] == {"v": 1}
