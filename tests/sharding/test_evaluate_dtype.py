"""`catcap evaluate --checkpoint --dtype bf16`: the weights decode in bf16, and the scores come out."""

import json

from catcap.inference.captioner import Captioner
from catcap.cli.main import main


def test_evaluate_decodes_with_bf16_weights(tiny_checkpoint, tmp_path, monkeypatch):
    checkpoint, _ = tiny_checkpoint
    seen = []
    load = Captioner.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        cap = load(cls, *args, **kwargs)
        seen.append(cap.dtype)
        return cap

    monkeypatch.setattr(Captioner, "from_pretrained", classmethod(spy))
    paths = {}
    for dtype in ("fp32", "bf16"):
        paths[dtype] = tmp_path / f"{dtype}.json"
        assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", "2", "--metrics", "bleu",
                     "--device", "cpu", "--quiet", "--dtype", dtype, "--save-results", str(paths[dtype]),
                     "--output", str(tmp_path / f"{dtype}_scores.json")]) == 0
        assert "Bleu_4" in json.loads((tmp_path / f"{dtype}_scores.json").read_text())["corpus"]
    assert [str(d) for d in seen] == ["torch.float32", "torch.bfloat16"]
    fp32, bf16 = (json.loads(p.read_text()) for p in paths.values())
    assert [r["image_id"] for r in bf16] == [r["image_id"] for r in fp32]
    assert all(r["caption"] for r in bf16)


def test_dtype_needs_checkpoint(capsys):
    assert main(["evaluate", "--example", "--dtype", "bf16"]) == 2
    assert "--dtype" in capsys.readouterr().err


def test_evaluate_decodes_under_bf16_autocast(tiny_checkpoint, tmp_path):
    """`--precision bf16`: the same images captioned under autocast (weights stay fp32)."""
    checkpoint, _ = tiny_checkpoint
    out = tmp_path / "bf16.json"
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--split", "test", "--beam", "2", "--metrics", "bleu",
                 "--device", "cpu", "--quiet", "--precision", "bf16", "--save-results", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 7
