"""Validation decodes with the rules of `catcap evaluate` / Captioner.generate: never <unk>, <pad>, <bos>.

Regression: SCST never samples <unk> (it is suppressed), so nothing keeps its probability down;
validation used plain greedy decoding, which then emitted runs of <unk> and reported a collapse
(Flickr8k val CIDEr-D 0.06) that `catcap evaluate` did not see (0.49)."""

import torch

from catcap.api import load_experiment
from catcap.decoding import GenerationConfig
from catcap.inference.captioner import Captioner
from catcap.training.setup import make_model, prepare_data
from catcap.training.validate import decode_split


def test_validation_never_emits_unk_and_matches_generate(tiny_world, tiny_overrides, tmp_path):
    cfg = load_experiment(None, tiny_overrides(tiny_world, tmp_path / "run"))
    data = prepare_data(cfg)
    torch.manual_seed(0)
    model = make_model(cfg, data.vocab).eval()
    out_bias = [p for n, p in model.named_parameters() if n.endswith("bias") and p.shape == (len(data.vocab),)]
    assert len(out_bias) == 1
    with torch.no_grad():
        out_bias[0][data.vocab.unk_id] += 50.0  # <unk> is now every step's argmax
    ids, cands, _ = decode_split(model, data.val, data.vocab, torch.device("cpu"), 8,
                                GenerationConfig(num_beams=1, max_length=12))
    assert len(cands) == len(data.val) and all(cands)
    assert not any("<unk>" in c for c in cands)
    generated = Captioner(model, data.vocab, cfg, torch.device("cpu")).generate(
        [data.val[i].regions for i in range(len(data.val))], num_beams=1, max_length=12)
    assert [" ".join(c) for c in cands] == generated
