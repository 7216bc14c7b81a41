"""Sharded `catcap evaluate --checkpoint` and caption result files: the merge writes the
one-process file byte for byte; a torchrun caption job merges on rank 0 (finish_sharded)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from catcap.cli.main import main

CAPTION = Path(__file__).with_name("fake_caption_main.py")


def _evaluate(checkpoint, results, *extra):
    return main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", "2", "--metrics", "bleu",
                 "--device", "cpu", "--quiet", "--save-results", str(results), *extra])


@pytest.mark.parametrize("count", [2, 3])
def test_sharded_evaluate_results_merge_to_the_one_process_file(tiny_checkpoint, tmp_path, count, capsys):
    checkpoint, world = tiny_checkpoint
    one = tmp_path / "one.json"
    assert _evaluate(checkpoint, one) == 0
    capsys.readouterr()
    out = tmp_path / "many" / "results.json"
    for i in range(count):
        assert _evaluate(checkpoint, out, "--shard", f"{i}/{count}") == 0
    printed = capsys.readouterr().out
    assert "catcap merge" in printed and "catcap evaluate --results" in printed and "Bleu_4" not in printed
    assert main(["merge", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{count} parts merged (7 entries" in printed and "catcap evaluate --results" in printed
    assert out.read_bytes() == one.read_bytes()
    assert main(["evaluate", "--results", str(out), "--refs", str(world.dataset), "--split", "test",
                 "--metrics", "bleu", "--quiet"]) == 0


def test_a_sharded_evaluate_needs_save_results_and_no_shard_under_torchrun(tiny_checkpoint, monkeypatch, capsys):
    checkpoint, _ = tiny_checkpoint
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--shard", "0/2", "--quiet"]) == 2
    assert "needs --save-results" in capsys.readouterr().err
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--shard", "0/2", "--save-results", "r.json"]) == 2
    assert "use one or the other" in capsys.readouterr().err


def test_results_merge_refuses_a_broken_or_overlapping_part(tmp_path, capsys):
    out = tmp_path / "r.json"
    (tmp_path / "r.part-000-of-002.json").write_text('[{"image_id": 1, "caption": "a"}]\n')
    (tmp_path / "r.part-001-of-002.json").write_text('[{"image_id": 1, "caption": "b"}]\n')
    assert main(["merge", str(out)]) == 2
    assert "image 1 is in both" in capsys.readouterr().err
    (tmp_path / "r.part-001-of-002.json").write_text('{"image_id": 2}')
    assert main(["merge", str(out)]) == 2
    assert "not a COCO result list" in capsys.readouterr().err and not out.exists()


def test_jsonl_parts_are_concatenated_in_shard_order(tmp_path, capsys):
    out = tmp_path / "caps.jsonl"
    rows = [json.dumps({"image": f"p{i}.jpg", "caption": f"c {i}"}) + "\n" for i in range(5)]
    blocks = [rows[:1], rows[1:3], rows[3:]]
    for i, block in enumerate(blocks):
        (tmp_path / f"caps.part-{i:03d}-of-003.jsonl").write_text("".join(block))
    (tmp_path / "caps.part-001-of-003.jsonl").rename(tmp_path / "caps.part-001-of-003.jsonl.partial")
    assert main(["merge", str(out)]) == 2
    assert "unfinished" in capsys.readouterr().err
    (tmp_path / "caps.part-001-of-003.jsonl.partial").rename(tmp_path / "caps.part-001-of-003.jsonl")
    assert main(["merge", str(out), "--keep-parts"]) == 0
    assert out.read_text() == "".join(rows) and len(list(tmp_path.glob("caps.part-*"))) == 3
    (tmp_path / "caps.part-002-of-003.jsonl").write_text(rows[3] + "not json\n")
    assert main(["merge", str(out)]) == 2
    assert "line 2 is not a JSON object" in capsys.readouterr().err


def test_a_torchrun_caption_job_merges_on_rank0(tmp_path):
    out = tmp_path / "caps.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          str(CAPTION), str(out)], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rank 0: merged=True" in run.stdout and "rank 1: merged=False" in run.stdout
    sys.path.insert(0, str(CAPTION.parent))
    from fake_caption_main import IMAGES, lines

    assert out.read_text() == lines(IMAGES) and not list(tmp_path.glob("caps.part-*"))


def test_torchrun_evaluate_merges_and_scores_on_rank0(tiny_checkpoint, tmp_path):
    checkpoint, _ = tiny_checkpoint
    one = tmp_path / "one.json"
    assert _evaluate(checkpoint, one) == 0
    out = tmp_path / "results.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "-m", "catcap", "evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", "2",
                          "--metrics", "bleu", "--device", "cpu", "--quiet", "--save-results", str(out)],
                         check=False, capture_output=True, text=True, env=env, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("Bleu_4") == 1 and "(7 images)" in run.stdout  # rank 0 alone scores, all 7
    assert out.read_bytes() == one.read_bytes() and not list(tmp_path.glob("results.part-*"))


@pytest.mark.parametrize("command", ["extract", "merge", "evaluate"])
def test_help_examples_are_commands_the_parser_accepts(command, capsys):
    from help_examples import example_commands, parse_example

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = "\n".join(line for line in capsys.readouterr().out.split("options:")[0].splitlines()
                     if not line.strip().startswith("#"))  # extract's examples carry comment lines
    commands = example_commands(text)
    assert any("--shard" in c for c in commands) or command == "merge"
    for argv in commands:
        parse_example(argv)
