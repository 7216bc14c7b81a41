"""No command writes over one of its own inputs (issue 40; docs/reliability.md): a table generated
from the argparse definitions. Every command is run with each of its output options equal to each
of its input options, the shared path once a file and once a folder; each run must exit 2 with a
message naming both options, and the input must be byte-identical afterwards. A new command or
option is covered by declaring its path roles (catcap/cli/paths.py); an option whose metavar or
name says it holds a path but that has no role fails here. The config's paths (``out_dir``
against ``data.*`` and ``train.init_from``) are generated from the dataclass fields alike."""

import argparse
import dataclasses
import os
import typing

import pytest

from catcap.cli import paths
from catcap.cli.main import main
from catcap.training.experiment import ExperimentConfig
from cli_table import argv, commands, names_a_path, value_for

COMMANDS = commands()


def _pairs():
    for command in COMMANDS:
        for out in command.with_role("writes"):
            for inp in command.with_role("reads"):
                if out is not inp:
                    yield pytest.param(command, out, inp, id=f"{command.name}:{paths.label(out)}={paths.label(inp)}")


PAIRS = list(_pairs())


def _snapshot(path) -> dict:
    if path.is_file():
        return {path: path.read_bytes()}
    return {p: p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _shared(tmp_path, kind: str):
    """The one path given to both options: a file, or a folder holding the kinds of files the
    commands read from folders (a photo, a JSON file, a run's log)."""
    if kind == "file":
        shared = tmp_path / "shared.json"
        shared.write_bytes(b'{"precious": "an input"}\n')
    else:
        shared = tmp_path / "shared"
        shared.mkdir()
        for name in ("a.json", "a.jpg", "log.jsonl", "model.safetensors"):
            (shared / name).write_bytes(f"precious {name}\n".encode())
    return shared


def test_the_table_covers_the_commands_that_write():
    """The generated table is not empty by accident: the commands known to write files from
    files are in it (a command is added to the table by declaring roles, never here)."""
    covered = {p.values[0].name for p in PAIRS}
    assert {"evaluate", "caption", "extract", "prepare", "plot-log", "report", "human-eval export", "import coco",
            "vqa evaluate", "zoo build", "analyze history"} <= covered, covered
    assert len(PAIRS) >= 40


def test_every_path_option_has_a_role():
    missing = [f"catcap {c.name} {paths.label(a)} (metavar {a.metavar!r})" for c in COMMANDS for a in c.actions
               if names_a_path(a) and paths.role_of(a) is None]
    assert not missing, ("these options name a path but declare no role; add paths.declare(parser, <dest>=paths."
                         f"INPUT / OUTPUT / ...) next to their add_argument: {missing}")


@pytest.mark.parametrize("kind", ["file", "folder"])
@pytest.mark.parametrize("command,out,inp", PAIRS)
def test_an_output_equal_to_an_input_is_refused(command, out, inp, kind, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shared = _shared(tmp_path, kind)
    before = _snapshot(shared)
    line = argv(command, tmp_path, {out: value_for(out, str(shared)), inp: value_for(inp, str(shared))})
    code = main(line)
    err = capsys.readouterr().err
    assert code == 2, (line, err)
    assert "write over its own input" in err and paths.label(out) in err and paths.label(inp) in err, err
    assert _snapshot(shared) == before
    assert sorted(os.listdir(tmp_path)) == sorted([shared.name]), "the refused command created files"


def test_a_photo_folder_stands_for_the_files_extract_reads():
    from catcap.features.extract import IMAGE_SUFFIXES

    assert paths.PHOTO_SUFFIXES == tuple(s.lstrip(".") for s in IMAGE_SUFFIXES)


def test_resolved_links_and_dots_are_the_same_file(tmp_path, capsys):
    """Symlinks, ``..`` and hard links are seen through (for one command: the rule is one function)."""
    results = tmp_path / "results.json"
    results.write_text("[]")
    (tmp_path / "sub").mkdir()
    (tmp_path / "soft.json").symlink_to(results)
    os.link(results, tmp_path / "hard.json")
    for other in ("soft.json", "sub/../results.json", "hard.json"):
        code = main(["evaluate", "--results", str(results), "--refs", str(tmp_path / "refs.json"),
                     "--output", str(tmp_path / other)])
        assert code == 2 and "write over its own input" in capsys.readouterr().err, other
    assert results.read_text() == "[]"


def test_a_model_named_by_its_zoo_name_in_an_ensemble_or_by_default_is_its_folder(tmp_path, capsys, monkeypatch):
    """A checkpoint option names a folder also as a zoo name, as the second model of an ensemble
    (``A,B``) and, for caption, by default (the bundled model): an output into that folder's files
    is refused like one given as a path, and the model's files are byte-identical."""
    model = tmp_path / "zoo" / "flickr8k-m2"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"format": "catcap-zoo-v1"}')
    monkeypatch.setenv("CATCAP_ZOO", str(tmp_path / "zoo"))
    monkeypatch.chdir(tmp_path)
    target = str(model / "config.json")
    for line in (["caption", "--checkpoint", "flickr8k-m2", "1", "--out", target],
                 ["caption", "--checkpoint", f"{tmp_path / 'other'},flickr8k-m2", "1", "--out", target],
                 ["caption", "1", "--out", target, "--restart"],
                 ["evaluate", "--checkpoint", "other", "--checkpoint", "flickr8k-m2", "--save-results", target],
                 ["evaluate", "--checkpoint", "other,flickr8k-m2", "--output", target]):
        assert main(line) == 2, line
        err = capsys.readouterr().err
        assert "write over its own input" in err and "--checkpoint" in err, (line, err)
    assert (model / "config.json").read_text() == '{"format": "catcap-zoo-v1"}'
    assert sorted(os.listdir(tmp_path)) == ["zoo"]


def test_the_data_files_a_checkpoint_reads_by_default_are_inputs(tmp_path, capsys, monkeypatch):
    """Without --refs / --features, caption and evaluate read the model's training files
    (config.data.dataset, .features; relative ones from here, else from the run's folder): an
    output over one of them is refused, naming the option whose default it is."""
    import json

    (tmp_path / "run").mkdir()
    for name in ("d.json", "f.h5"):
        (tmp_path / "run" / name).write_text("precious")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"config": {"data": {"dataset": "d.json", "features": "f.h5"}},
                                                  "workdir": str(tmp_path / "run")}))
    monkeypatch.setenv("CATCAP_ZOO", str(tmp_path / "zoo"))  # no bundled model: caption needs --checkpoint
    monkeypatch.chdir(ckpt)
    for line, option in ((["evaluate", "--checkpoint", str(ckpt), "--save-results", "../run/d.json"], "--refs"),
                         (["evaluate", "--checkpoint", f"other,{ckpt}", "--output", "../run/f.h5"], "--features"),
                         (["caption", "--checkpoint", str(ckpt), "1", "--out", "../run/f.h5"], "--features")):
        assert main(line) == 2, line
        err = capsys.readouterr().err
        assert "write over its own input" in err and f"{option} (not given: its default)" in err, (line, err)
    assert all((tmp_path / "run" / n).read_text() == "precious" for n in ("d.json", "f.h5"))
    assert sorted(os.listdir(tmp_path / "run")) == ["d.json", "f.h5"]
    # given, the option replaces the default: the model's training files are not read then
    from catcap.cli.checks import before_run
    from catcap.cli.main import build_parser

    parser = build_parser()
    before_run(parser, parser.parse_args(["evaluate", "--checkpoint", str(ckpt), "--refs", "other.json",
                                          "--features", "other.h5", "--save-results", "../run/d.json"]))


def test_an_output_beside_its_inputs_is_accepted(tmp_path):
    """The rule is not "refuse everything": a new file next to the input, or an output folder
    that holds the input among files the command does not write, passes the check."""
    from catcap.cli.checks import before_run
    from catcap.cli.main import build_parser

    parser = build_parser()
    for line in (["evaluate", "--results", "r.json", "--refs", "d.json", "--output", "scores.json"],
                 ["prepare", "--dataset", "data/d.json", "--out", "data"],
                 ["plot-log", "run", "--out", "run/training.png"],
                 ["extract", "--images", "photos", "--out", "photos/features.h5"]):
        before_run(parser, parser.parse_args([*line[:1], *[str(tmp_path / w) if "." in w or "/" in w or w in (
            "run", "photos", "data") else w for w in line[1:]]]))


# ---- the config's paths (catcap train, validate-config) ----

def _path_fields(cls, prefix=""):
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from _path_fields(hints[f.name], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


def test_every_config_path_field_has_a_role():
    import re

    looks = re.compile(r"dataset|features|dir|path|file|from|checkpoint")
    missing = [k for k, f in _path_fields(ExperimentConfig) if looks.search(k.split(".")[-1]) and "path" not in f.metadata]
    assert not missing, f"config fields that name a path without config.path_field(...): {missing}"


CONFIG_PAIRS = [(o, i) for o, fo in _path_fields(ExperimentConfig) if fo.metadata.get("path", {}).get("kind") == "output"
                for i, fi in _path_fields(ExperimentConfig) if fi.metadata.get("path", {}).get("kind") == "input"]


def test_the_config_table_is_not_empty():
    assert ("out_dir", "train.init_from") in CONFIG_PAIRS and ("out_dir", "data.dataset") in CONFIG_PAIRS


@pytest.mark.parametrize("command", ["validate-config", "train"])
@pytest.mark.parametrize("out,inp", CONFIG_PAIRS, ids=[f"{o}={i}" for o, i in CONFIG_PAIRS])
@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_config_output_equal_to_an_input_is_refused(command, out, inp, kind, tmp_path, capsys):
    shared = _shared(tmp_path, kind)
    before = _snapshot(shared)
    code = main([command, f"{out}={shared}", f"{inp}={shared}"])
    err = capsys.readouterr().err
    assert code == 2 and "write over its own input" in err and out in err and inp in err, err
    assert _snapshot(shared) == before
