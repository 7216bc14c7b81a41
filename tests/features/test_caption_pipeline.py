"""`catcap caption DIR` as a pipeline (catcap.inference.pipeline, catcap.inference.caption_file): the same captions
in the same order as the one-thread path, a JSON Lines file written incrementally, an
interrupted run that resumes to the same bytes, a partial of other settings refused, and a
shard's part. Uses the bundled zoo model (reads pixels) on 9 Flickr8k photos + 1 broken file."""

import json
import os
from pathlib import Path
import subprocess
import time
import sys

import pytest

from catcap import api
from catcap.inference.caption_file import HEADER, partial_path
from catcap.cli.main import main
from flickr8k_files import bundled_model_path

BATCH = 4
SETTINGS = ["--beam", "2", "--max-len", "8", "--batch-size", str(BATCH), "--device", "cpu", "--quiet"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread (the pipeline gives each stage one): two OpenMP threads per operation
    crawl when the machine's other core is busy."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model():
    return bundled_model_path()


@pytest.fixture(scope="module")
def photos(flickr8k_images, tmp_path_factory):
    """A folder of 9 photos (links) with an unreadable ``1000999_broken.jpg`` second by name."""
    folder = tmp_path_factory.mktemp("photos")
    for src in sorted(flickr8k_images.glob("*.jpg"))[:9]:
        (folder / src.name).symlink_to(src)
    (folder / "1000999_broken.jpg").write_bytes(b"\xff\xd8 not a JPEG")
    return folder


@pytest.fixture(scope="module")
def items(photos):
    return api.expand_image_folders([str(photos)])


@pytest.fixture(scope="module")
def uninterrupted(model, photos, tmp_path_factory):
    """The bytes of an uninterrupted `catcap caption DIR --out F.jsonl` (in this process); exit
    status 1: the broken photo could not be read (docs/cli.md)."""
    out = tmp_path_factory.mktemp("whole") / "captions.jsonl"
    assert main(["caption", "--checkpoint", model, *SETTINGS, "--out", str(out), str(photos)]) == 1
    return out.read_bytes()


def test_pipelined_captions_equal_the_one_thread_path(model, photos, items):
    job = api.prepare_caption(model, [str(photos)], num_beams=2, max_length=8, device="cpu")
    piped = list(api.caption_stream(job, progress=False, batch_size=BATCH, workers=2, pipelined=True))
    plain = list(api.caption_stream(job, progress=False, batch_size=BATCH, workers=0, pipelined=False))
    assert piped == plain
    assert [c.image for c in piped] == items and items[1].endswith("1000999_broken.jpg")
    assert piped[1].caption is None and "cannot identify image" in piped[1].error
    assert all(c.error is None and c.caption for i, c in enumerate(piped) if i != 1)
    for start in range(0, len(items), BATCH):  # and Captioner.generate(images=) of the same batches
        good = [i for i in items[start:start + BATCH] if "broken" not in i]
        assert [c.caption for c in piped[start:start + BATCH] if c.error is None] == \
            job.cap.generate(images=good, num_beams=2, max_length=8)


def test_the_jsonl_file_is_one_result_line_per_image_in_order(model, photos, items, uninterrupted, tmp_path, capsys):
    lines = uninterrupted.decode("utf-8").splitlines(keepends=True)
    rows = [json.loads(line) for line in lines]
    assert [r["image"] for r in rows] == items
    assert all(set(r) == {"image", "image_id", "caption"} and isinstance(r["caption"], str)
               for i, r in enumerate(rows) if i != 1)
    assert [r["image_id"] for r in rows] == [int(Path(i).name.split("_")[0]) for i in items]  # Flickr photo ids
    assert set(rows[1]) == {"image", "image_id", "caption", "error"} and rows[1]["caption"] is None
    assert lines == [json.dumps(r, ensure_ascii=False) + "\n" for r in rows]
    out = tmp_path / "again.jsonl"
    out.write_bytes(uninterrupted)
    before = out.stat().st_mtime_ns
    assert main(["caption", "--checkpoint", model, *SETTINGS, "--out", str(out), str(photos)]) == 1  # broken photo
    assert "already complete" in capsys.readouterr().err and out.stat().st_mtime_ns == before
    assert main(["caption", "--checkpoint", model, *SETTINGS, "--out", str(out), "--restart", str(photos)]) == 1
    assert out.read_bytes() == uninterrupted and not partial_path(out).exists()


def _cli(args, fault=None):
    env = dict(os.environ, CATCAP_FAULT=fault or "", OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "catcap", "caption", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_an_interrupted_run_resumes_to_the_same_bytes(model, photos, uninterrupted, tmp_path):
    out = tmp_path / "captions.jsonl"
    args = ["--checkpoint", model, *SETTINGS, "--out", str(out), str(photos)]
    killed = _cli(args, fault="caption.after_batch:kill:2")
    assert killed.returncode in (-9, 137), killed.stderr
    partial = partial_path(out)
    assert not out.exists() and partial.exists()
    lines = partial.read_text(encoding="utf-8").splitlines(keepends=True)
    assert HEADER in json.loads(lines[0]) and len(lines) == 1 + 2 * BATCH
    # worse than a kill between batches: the last batch half written, its last line torn
    partial.write_text("".join(lines[:-1]) + lines[-1][:10], encoding="utf-8")
    resumed = _cli(args)
    assert resumed.returncode == 1, resumed.stderr  # the broken photo
    assert f"continuing {partial}: {BATCH} of 10 images done" in resumed.stderr
    assert out.read_bytes() == uninterrupted and not partial.exists()


def test_a_partial_of_other_settings_or_inputs_is_refused(model, photos, items, tmp_path, capsys):
    out = tmp_path / "captions.jsonl"
    job = api.prepare_caption(model, [str(photos)], num_beams=2, max_length=8, device="cpu")
    header = {HEADER: dict(job.settings, batch_size=BATCH, beam=5)}
    partial_path(out).write_text(json.dumps(header) + "\n", encoding="utf-8")
    assert main(["caption", "--checkpoint", model, *SETTINGS, "--out", str(out), str(photos)]) == 2
    err = capsys.readouterr().err
    assert "was started with other settings (beam: 5 then, 2 now)" in err and "--restart" in err
    header[HEADER]["beam"] = 2
    other = {"image": "elsewhere/x.jpg", "caption": "a dog"}
    partial_path(out).write_text(json.dumps(header) + "\n" + json.dumps(other) + "\n", encoding="utf-8")
    assert main(["caption", "--checkpoint", model, *SETTINGS, "--out", str(out), str(photos)]) == 2
    err = capsys.readouterr().err
    assert f"its result 1 is for 'elsewhere/x.jpg', but this run's image 1 is {items[0]!r}" in err
    assert not out.exists()


def test_a_shard_writes_its_block_into_its_part(model, photos, items, tmp_path, capsys):
    out = tmp_path / "captions.jsonl"
    one = ["--checkpoint", model, "--beam", "2", "--max-len", "8", "--batch-size", "1", "--device", "cpu", "--quiet"]
    assert main(["caption", *one, "--shard", "1/3", "--out", str(out), str(photos)]) == 0
    part = tmp_path / "captions.part-001-of-003.jsonl"
    assert part.exists() and not out.exists()
    rows = [json.loads(line) for line in part.read_text(encoding="utf-8").splitlines()]
    assert [r["image"] for r in rows] == items[3:6]
    job = api.prepare_caption(model, items[3:6], num_beams=2, max_length=8, device="cpu")
    assert [r["caption"] for r in rows] == [job.cap.generate(images=[i], num_beams=2, max_length=8)[0]
                                            for i in items[3:6]]
    assert main(["caption", *one, "--shard", "1/3", str(photos)]) == 2
    assert "needs --out FILE.jsonl" in capsys.readouterr().err


def test_merged_shards_equal_the_one_process_file(model, photos, tmp_path, capsys):
    """Every shard, then `catcap merge`: the one-process file byte for byte (batch 1 on both
    sides, so that no batch is cut differently)."""
    one = ["--checkpoint", model, "--beam", "2", "--max-len", "8", "--batch-size", "1", "--device", "cpu", "--quiet"]
    whole = tmp_path / "whole.jsonl"
    assert main(["caption", *one, "--out", str(whole), str(photos)]) == 1  # the broken photo
    out = tmp_path / "sharded" / "captions.jsonl"
    for i in range(3):  # the broken photo is in shard 0
        assert main(["caption", *one, "--shard", f"{i}/3", "--out", str(out), str(photos)]) == (1 if i == 0 else 0)
    assert "catcap merge" in capsys.readouterr().err
    assert main(["merge", str(out)]) == 0
    assert out.read_bytes() == whole.read_bytes()


def test_the_help_teaches_commands_that_parse():
    from help_examples import example_commands, parse_example

    from catcap.cli.caption_cmds import CAPTION_HELP

    examples = example_commands(CAPTION_HELP)
    assert any("--out" in e and "--shard" in e for e in examples) and any("--restart" in e for e in examples)
    for example in examples:
        assert parse_example(example).command == "caption"


def test_the_background_stage_is_bounded_and_hands_its_errors_over():
    from catcap.inference.pipeline import in_background

    made = []

    def produce():
        for i in range(100):
            made.append(i)
            yield i

    stream = in_background(produce, maxsize=2)
    assert next(stream) == 0
    time.sleep(0.3)
    assert len(made) <= 4  # the consumed one, two queued, one waiting to be put: never all 100
    stream.close()

    def broken():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(in_background(broken))
