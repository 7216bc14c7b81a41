"""The messages a newcomer meets first (issue 42): Ctrl-C ends a long command with one line and
exit 130 (caption and train, interrupted by a real SIGINT through the fault point's ``sigint``
action), a mistyped photo folder is named as such, ``catcap train`` without ``--config`` says
so, an unknown config key gets "did you mean", and ``catcap --help`` lists the commands by task."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from catcap.cli.main import SECTIONS, build_parser, main
from catcap.data.synthetic import make_world
from flickr8k_files import FLICKR8K, bundled_model_path
from tiny_runs import tiny_run_overrides

ONE_LINE = re.compile(r"^catcap (\w+): interrupted: (\d+) of (\d+) (\w+) done(?: \(([^)]*)\))?; rerun the same "
                      r"command(.*)$")


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT's default action, as a command typed in a terminal has it. A test run
    started in the background by a non-interactive shell (``pytest &``) ignores SIGINT, and its
    children inherit that, so without this the fault point's Ctrl-C would reach nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def catcap(args, fault=None, **env):
    environment = dict(os.environ, CATCAP_FAULT=fault or "", OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-m", "catcap", *args], env=environment, capture_output=True, text=True,
                          timeout=600, preexec_fn=_ctrl_c_as_in_a_terminal)


def last_line(proc) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def bundled():
    return bundled_model_path()


def test_ctrl_c_ends_a_caption_run_with_one_line_and_a_rerun_continues(bundled, tmp_path):
    found = sorted((FLICKR8K / "images").glob("*.jpg"))[:6]
    if len(found) < 6:
        pytest.skip(f"Flickr8k photos not found in {FLICKR8K / 'images'} (see ../shared/data/flickr8k/README.md)")
    photos = tmp_path / "photos"
    photos.mkdir()
    for src in found:
        (photos / src.name).symlink_to(src)
    out = tmp_path / "captions.jsonl"
    args = ["caption", str(photos), "--out", str(out), "--batch-size", "2", "--beam", "1", "--quiet"]
    stopped = catcap(args, fault="caption.after_batch:sigint:2")
    assert stopped.returncode == 130, stopped.stderr
    match = ONE_LINE.match(last_line(stopped))
    assert match and (match.group(1), match.group(3), match.group(4)) == ("caption", "6", "images"), stopped.stderr
    assert int(match.group(2)) in (2, 4) and match.group(6) == " to continue"  # the bar counts a batch behind the file
    assert not out.exists() and out.with_name(out.name + ".partial").exists()
    again = catcap(args)
    assert again.returncode == 0 and "4 of 6 images done" in again.stderr, again.stderr
    assert len(out.read_text().splitlines()) == 6


def test_ctrl_c_ends_training_with_one_line_naming_resume(tmp_path):
    world = make_world(tmp_path / "world", num_train=40, num_val=10, num_test=10, seed=5, feature_dim=32,
                       progress=False)
    args = ["train", *tiny_run_overrides(world, tmp_path / "run", **{"train.epochs": 2})]
    stopped = catcap(args, fault="runlog.after_append:sigint:3")
    assert stopped.returncode == 130, stopped.stderr
    line = last_line(stopped)
    match = ONE_LINE.match(line)
    assert match and match.group(1) == "train" and match.group(4) == "batches", line
    assert match.group(5) == "xe epoch 1/2" and "with --resume to continue from the last checkpoint" in line


def test_a_mistyped_photo_folder_is_named_not_looked_up_as_a_feature(bundled, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["caption", "photo5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no photo or folder named 'photo5'" in err and "feature file" not in err


def test_train_without_a_config_says_to_pass_one(capsys):
    assert main(["train"]) == 2
    err = capsys.readouterr().err
    assert "no --config" in err and "--config configs/experiments/demo.yaml" in err


@pytest.mark.parametrize("override, hint", [("train.epoch=3", "(did you mean 'epochs'?)"),
                                            ("model.d_modl=64", "(did you mean 'd_model'?)")])
def test_an_unknown_config_key_gets_did_you_mean(override, hint, capsys):
    assert main(["validate-config", "--no-data", override]) == 2
    assert hint in capsys.readouterr().err


def test_the_help_lists_every_command_once_by_task_starting_with_the_first_hour(capsys):
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    listed = [name for _, names in SECTIONS for name in names]
    assert sorted(listed) == sorted(sub.choices)
    assert listed[:5] == ["caption", "serve", "evaluate", "compare", "report"]
    assert main([]) == 0
    text = capsys.readouterr().out
    positions = [text.index(f"    {name} ") for name in listed]
    assert positions == sorted(positions)
    assert "malloc" not in text and "oneDNN" not in text
