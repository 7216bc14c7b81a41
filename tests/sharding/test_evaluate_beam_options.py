"""`catcap evaluate --checkpoint --length-penalty LP --max-len N`: the split is captioned exactly as
`Captioner.generate(num_beams=..., max_length=N, length_penalty=LP)` captions it, and bad values
are refused before any decoding."""

import json

import pytest
import torch

from catcap import api
from catcap.inference.captioner import Captioner
from catcap.cli.main import main
from catcap.data.collate import pad_regions
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy


def _direct(checkpoint, world, **generate):
    cap = Captioner.from_pretrained(checkpoint, device="cpu")
    records = load_karpathy(str(world.dataset), ["test"])["test"]
    store = cap.reading(open_feature_store(str(world.features)))
    feats, mask, _ = pad_regions([torch.from_numpy(store.get(r.key).regions) for r in records], [None] * len(records))
    return {r.image_id: t for r, t in zip(records, cap.generate(feats, mask, **generate))}


@pytest.mark.parametrize("lp", ["0", "1.5"])
def test_evaluate_passes_length_penalty_and_max_len_to_beam_search(tiny_checkpoint, tmp_path, lp):
    checkpoint, world = tiny_checkpoint
    out = tmp_path / "results.json"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", "4", "--metrics", "bleu",
                 "--device", "cpu", "--quiet", "--length-penalty", lp, "--max-len", "5",
                 "--save-results", str(out)]) == 0
    got = {r["image_id"]: r["caption"] for r in json.loads(out.read_text())}
    want = _direct(checkpoint, world, num_beams=4, max_length=5, length_penalty=float(lp))
    assert got == want
    assert max(len(c.split()) for c in got.values()) <= 5


def test_length_penalty_changes_what_the_untrained_model_says(tiny_checkpoint):
    """The option is not inert: on the untrained model a strong penalty picks longer captions."""
    checkpoint, world = tiny_checkpoint
    plain = _direct(checkpoint, world, num_beams=4, max_length=8, length_penalty=0.0)
    longer = _direct(checkpoint, world, num_beams=4, max_length=8, length_penalty=3.0)
    words = lambda caps: sum(len(c.split()) for c in caps.values())  # noqa: E731
    assert plain != longer and words(longer) > words(plain)


@pytest.mark.parametrize("argv, message", [
    (["--length-penalty", "nan"], "--length-penalty: length_penalty must be a finite number"),
    (["--beam", "1", "--length-penalty", "1"], "--length-penalty: length_penalty must be 0 with --beam=1"),
    (["--max-len", "0"], "--max-len: max_length must be >= 1 (words per caption), got 0"),
])
def test_bad_beam_options_are_refused(tiny_checkpoint, argv, message, capsys):
    checkpoint, _ = tiny_checkpoint
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--quiet", *argv]) == 2
    assert message in capsys.readouterr().err


def test_beam_options_need_a_checkpoint(capsys):
    assert main(["evaluate", "--example", "--length-penalty", "1"]) == 2
    assert "--length-penalty only applies with --checkpoint" in capsys.readouterr().err


def test_caption_command_passes_the_length_penalty(tiny_checkpoint, tmp_path, capsys):
    """`catcap caption --length-penalty` captions feature-store keys as generate() does, and a
    partial output started with another penalty is not continued with this one."""
    checkpoint, world = tiny_checkpoint
    records = load_karpathy(str(world.dataset), ["test"])["test"]
    keys = [r.key for r in records]
    base = ["caption", "--checkpoint", str(checkpoint), "--features", str(world.features), "--beam", "4",
            "--max-len", "8", "--device", "cpu", "--quiet", "--workers", "0"]
    assert main([*base, "--length-penalty", "3", "--json", *keys]) == 0
    got = [row["caption"] for row in json.loads(capsys.readouterr().out)]
    want = _direct(checkpoint, world, num_beams=4, max_length=8, length_penalty=3.0)
    assert got == [want[r.image_id] for r in records]
    job = api.prepare_caption(checkpoint, keys, features=str(world.features), num_beams=4, max_length=8, device="cpu",
                              length_penalty=3.0)
    job.close()
    assert job.settings["length_penalty"] == 3.0
    out = tmp_path / "caps.jsonl"  # a run with --length-penalty 3 that stopped before its first batch
    (tmp_path / "caps.jsonl.partial").write_text(json.dumps({"catcap_caption": job.settings}) + "\n")
    assert main([*base, "--out", str(out), *keys]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "length_penalty" in err, err
