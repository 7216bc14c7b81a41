"""`catcap evaluate --checkpoint A --checkpoint B` and `catcap caption --checkpoint A,B`: the
split is captioned as `Ensemble([A, B]).generate` captions it, and members with another
vocabulary are refused with exit status 2."""

import json

import torch

from catcap.cli.main import main
from catcap.config import to_dict
from catcap.data.collate import pad_regions
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.data.vocab import Vocab
from catcap.inference.captioner import Captioner
from catcap.inference.ensemble import Ensemble
from catcap.training.checkpoint import save_checkpoint
from catcap.training.setup import make_model


def _other(checkpoint, out, words=None, **model):
    """A checkpoint of the same config but another (untrained) model, e.g. CAT beside the Transformer."""
    from dataclasses import replace

    cap = Captioner.from_pretrained(checkpoint, device="cpu")
    cfg = replace(cap.config, model=replace(cap.config.model, **model))
    vocab = cap.vocab if words is None else Vocab(words)
    torch.manual_seed(1)
    return save_checkpoint(out, model=make_model(cfg, vocab), config=to_dict(cfg), vocab=vocab.to_dict())


def test_evaluate_and_caption_with_an_ensemble(tiny_checkpoint, tmp_path, capsys):
    first, world = tiny_checkpoint
    second = _other(first, tmp_path / "cat", cross_attention="caca")
    out = tmp_path / "results.json"
    assert main(["evaluate", "--checkpoint", str(first), "--checkpoint", str(second), "--split", "test",
                 "--metrics", "bleu", "--device", "cpu", "--quiet", "--max-len", "6", "--save-results", str(out)]) == 0
    got = {r["image_id"]: r["caption"] for r in json.loads(out.read_text())}
    ens = Ensemble.from_pretrained([first, second], device="cpu")
    records = load_karpathy(str(world.dataset), ["test"])["test"]
    store = open_feature_store(str(world.features))
    feats, mask, _ = pad_regions([torch.from_numpy(store.get(r.key).regions) for r in records], [None] * len(records))
    want = ens.generate(feats, mask, max_length=6)
    assert got == {r.image_id: t for r, t in zip(records, want)}
    alone = Captioner.from_pretrained(first, device="cpu").generate(feats, mask, max_length=6)
    assert want != alone, "the second member changes the captions (the test is not vacuous)"
    capsys.readouterr()
    keys = [r.key for r in records]
    assert main(["caption", "--checkpoint", f"{first},{second}", "--features", str(world.features), "--max-len", "6",
                 "--device", "cpu", "--quiet", "--workers", "0", "--json", *keys]) == 0
    assert [row["caption"] for row in json.loads(capsys.readouterr().out)] == want


def test_members_with_another_vocabulary_are_refused(tiny_checkpoint, tmp_path, capsys):
    first, _ = tiny_checkpoint
    other = _other(first, tmp_path / "other", words=[f"v{i}" for i in range(30)])
    assert main(["evaluate", "--checkpoint", f"{first},{other}", "--split", "test", "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "member 1 has another vocabulary than member 0" in err and "Traceback" not in err
