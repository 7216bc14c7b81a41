"""benchmarks/studies/history_scale.py measures CACA's final pass from outside the model: its
history weight must be the one the model reports (GenerationOutput.history_weights), step by step
and layer by layer, and the model must decode the same tokens with the recorder attached."""

import sys
from pathlib import Path

import pytest
import torch

from catcap.decoding import GenerationConfig, generate
from tiny_models import contract_batch, tiny_captioner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "studies"))

import history_scale  # noqa: E402


@pytest.mark.parametrize("options", [{}, {"normalize": False}], ids=["layernorm-entries", "literal-entries"])
def test_the_recorded_history_weight_is_the_models_own(options):
    features, feature_mask, _, _ = contract_batch()
    config = GenerationConfig(num_beams=1, max_length=6, output_history_weights=True)
    plain = generate(tiny_captioner("transformer", "caca", options), features, feature_mask, config)
    model = tiny_captioner("transformer", "caca", options)
    sums = history_scale.attach(model)
    out = generate(model, features, feature_mask, config)
    assert torch.equal(out.tokens, plain.tokens)  # recording changes nothing
    running = int(out.mask.all(dim=0).sum())  # steps at which no caption has ended yet
    assert running >= 2
    for k, numbers in enumerate(sums):
        assert set(numbers) == set(history_scale.COLUMNS)
        for t in range(running):
            assert numbers["a"][t] == pytest.approx(out.history_weights[:, t, k].mean().item(), abs=1e-6)
        assert all(v > 0 for name in ("K_X", "V_X", "K_HCM", "V_HCM", "q") for v in numbers[name])


def test_a_model_without_caca_is_refused_by_name():
    with pytest.raises(SystemExit, match="Transformer-family decoder with CACA"):
        history_scale.attach(tiny_captioner("updown", "caca"))
