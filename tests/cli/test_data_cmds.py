"""``catcap import flickr8k|coco`` and ``catcap prepare`` (in-process, through catcap.cli.main).

Oracles: the small inputs' outputs (image and caption counts, vocabulary sizes) are counted by
hand; the help texts' example commands are parsed by the real parser and, for Flickr8k, run
as printed on the copy next to the repository (its official split sizes: 6,000 / 1,000 images,
5 captions each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catcap.cli.main import main
from catcap.data.karpathy import load_karpathy
from help_examples import example_commands, parse_example


@pytest.fixture
def flickr(tmp_path):
    (tmp_path / "tok.txt").write_text("111_a.jpg#0\tA dog runs .\n111_a.jpg#1\tA dog .\n222_b.jpg#0\tA cat .\n"
                                      "333_c.jpg#0\tA dog sits\n999_z.jpg#0\tUnlisted\n", encoding="utf-8")
    (tmp_path / "train.txt").write_text("111_a.jpg\n222_b.jpg\n")
    (tmp_path / "val.txt").write_text("333_c.jpg\n")
    return tmp_path


def test_import_flickr8k_and_prepare(flickr, capsys):
    out = flickr / "data" / "dataset_flickr8k.json"
    rc = main(["import", "flickr8k", "--tokens", str(flickr / "tok.txt"), "--train", str(flickr / "train.txt"),
               "--val", str(flickr / "val.txt"), "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0
    assert "3 images (train 2, val 1), 4 captions" in cap.out and "flickr photo id" in cap.out
    assert "warning: 1 captioned image(s) are in no split list and are left out: 999_z.jpg" in cap.err
    assert {s: len(r) for s, r in load_karpathy(out).items()} == {"train": 2, "val": 1}

    rc = main(["prepare", "--dataset", str(out), "--out", str(flickr / "prep"), "--min-count", "2", "--max-len", "2"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "vocabulary: 6 tokens (2 words seen >= 2 times of 4 distinct)" in cap.out
    assert "33.33% longer than 2 words are cut" in cap.out
    summary = json.loads((flickr / "prep" / "prepare.json").read_text())
    assert summary["vocab_size"] == 6 and Path(summary["files"]["cider_df"]).parent == out.parent


def test_import_errors_are_clean(flickr, capsys):
    (flickr / "bad.txt").write_text("111_a.jpg#0\tfine\nbroken line\n")
    rc = main(["import", "flickr8k", "--tokens", str(flickr / "bad.txt"), "--train", str(flickr / "train.txt"),
               "--val", str(flickr / "val.txt"), "--out", str(flickr / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "catcap import: error:" in err and "bad.txt:2:" in err and "Traceback" not in err
    assert not (flickr / "x.json").exists()
    rc = main(["import", "coco", "--captions", str(flickr / "none.json"), "--split-list", "val", "--out", str(flickr / "c.json")])
    assert rc == 2 and "--split-list expects SPLIT=FILE" in capsys.readouterr().err
    rc = main(["prepare", "--dataset", str(flickr / "none.json"), "--out", str(flickr / "p")])
    assert rc == 2 and "dataset file not found" in capsys.readouterr().err


def test_import_coco(tmp_path, capsys):
    caps = {"images": [{"id": 1, "file_name": "COCO_val2014_000000000001.jpg"},
                       {"id": 2, "file_name": "COCO_val2014_000000000002.jpg"}],
            "annotations": [{"id": 1, "image_id": 1, "caption": "A dog."}, {"id": 2, "image_id": 2, "caption": "A cat."}]}
    (tmp_path / "c.json").write_text(json.dumps(caps))
    (tmp_path / "test.txt").write_text("2\n")
    out = tmp_path / "dataset_coco.json"
    rc = main(["import", "coco", "--captions", str(tmp_path / "c.json"), "--split-list", f"test={tmp_path / 'test.txt'}",
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert {s: [r.image_id for r in v] for s, v in load_karpathy(out).items()} == {"train": [1], "test": [2]}


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv, commands", [(["import"], [["import", "flickr8k"]]),
                                            (["import", "flickr8k"], [["import", "flickr8k"]]),
                                            (["import", "coco"], [["import", "coco"]]),
                                            (["prepare"], [["import", "flickr8k"], ["prepare"]])])
def test_help_examples_are_commands_that_parse(argv, commands, capsys):
    """Every example a help text shows is accepted by the parser, option for option."""
    examples = example_commands(_help(argv, capsys))
    assert [e[:len(c)] for e, c in zip(examples, commands)] == commands and len(examples) == len(commands)
    for example in examples:
        args = parse_example(example)
        assert args.command == example[0]


def test_the_flickr8k_examples_run_on_the_copy_next_to_the_repository(tmp_path, capsys, monkeypatch):
    """``catcap prepare --help`` teaches import then prepare on ../shared/data/flickr8k: run both,
    as printed, from the repository root (only --out / --dataset moved into tmp_path)."""
    root = Path(__file__).resolve().parents[2]
    if not (root.parent / "shared" / "data" / "flickr8k" / "Flickr8k.token.txt").exists():
        pytest.skip("the real Flickr8k is not at ../shared/data/flickr8k")
    imported, prepared = example_commands(_help(["prepare"], capsys))
    monkeypatch.chdir(root)
    dataset = tmp_path / "dataset_flickr8k.json"
    assert main(_with(imported, "--out", dataset)) == 0
    assert main(_with(_with(prepared, "--dataset", dataset), "--out", tmp_path / "prepared")) == 0
    assert "7000 images (train 6000, val 1000), 35000 captions" in capsys.readouterr().out
    assert {s: len(r) for s, r in load_karpathy(dataset).items()} == {"train": 6000, "val": 1000}
    assert json.loads((tmp_path / "prepared" / "prepare.json").read_text())["splits"]["train"] == {
        "images": 6000, "captions": 30000}


def _with(argv: list[str], flag: str, value) -> list[str]:
    """argv with the value of ``flag`` replaced."""
    i = argv.index(flag)
    return [*argv[:i + 1], str(value), *argv[i + 2:]]
