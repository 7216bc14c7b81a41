"""Per-step outputs of generation (``output_attentions``, ``output_history_weights``): every
returned caption gets the attention of its own steps, followed back through beam search's
reorders. Oracle: the caption fed again, alone, through ``model.decoder.step`` one token at a
time (no beams, no batch), whose extras at each step are what the caption's steps saw."""

import pytest
import torch

from catcap.decoding import GenerationConfig, generate
from scripted_models import ScriptedModel, scripted_batch
from test_beam import make_model, regions

EOS = 2
OUTPUTS = dict(output_attentions=True, output_history_weights=True)


@torch.no_grad()
def replay(model, features, mask, tokens: list[int]) -> list[list[dict]]:
    """Extras of every step of one caption (features (1, N, F)) fed through decoder.step."""
    memory, memory_mask = model.encode(features, mask)
    state = model.init_state(memory, memory_mask, group=1)
    steps = []
    for token in [model.bos_id] + tokens[:-1]:
        _, state, extras = model.decoder.step(torch.tensor([token]), state)
        steps.append(extras)
    return steps


def check_against_replay(model, features, mask, out, rows_per_image):
    for row in range(out.tokens.shape[0]):
        image, length = row // rows_per_image, int(out.lengths[row])
        steps = replay(model, features[image:image + 1], mask[image:image + 1], out.tokens[row, :length].tolist())
        for t, extras in enumerate(steps):
            for layer, extra in enumerate(extras):
                torch.testing.assert_close(out.history_weights[row, t, layer], extra["history_weight"][0, :, 0],
                                           rtol=0, atol=1e-5)
                hist = extra["history_attention"]
                if hist is None:  # ihc's first step: no entries yet
                    assert not bool(out.history_attentions[row, t, layer].any())
                else:
                    m = hist.shape[-1]
                    torch.testing.assert_close(out.history_attentions[row, t, layer, :, :m], hist[0, :, 0],
                                               rtol=0, atol=1e-5)
                    assert not bool(out.history_attentions[row, t, layer, :, m:].any())
                if extra.get("region_attention") is not None:
                    torch.testing.assert_close(out.region_attentions[row, t, layer], extra["region_attention"][0, :, 0],
                                               rtol=0, atol=1e-5)
        assert not bool(out.history_weights[row, length:].any()), "zero after the caption's end"


@pytest.mark.parametrize("arch, cross, options", [
    ("transformer", "caca", {}), ("transformer", "caca", {"strategy": "ihc", "shared": False}),
    ("transformer", "light_caca", {"strategy": "ohc"}), ("m2", "caca", {}), ("updown", "caca", {}),
])
@pytest.mark.parametrize("settings", [
    {"num_beams": 1},
    {"num_beams": 4, "num_return_sequences": 4},
    {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5, "num_return_sequences": 3},
    {"do_sample": True, "num_return_sequences": 2, "seed": 0},
])
def test_each_caption_gets_the_attention_of_its_own_steps(arch, cross, options, settings):
    model, (features, mask) = make_model(1, 0.6, cross, arch, **options), regions(3)
    config = GenerationConfig(max_length=7, **settings, **OUTPUTS)
    with torch.no_grad():
        out = generate(model, features, mask, config)
        plain = generate(model, features, mask, GenerationConfig(max_length=7, **settings))
    assert torch.equal(out.tokens, plain.tokens) and torch.equal(out.scores, plain.scores), "recording changes nothing"
    assert plain.history_weights is None and plain.region_attentions is None and plain.history_attentions is None
    rows, t = out.tokens.shape
    layers = len(model.decoder.layers) if hasattr(model.decoder, "layers") else 1
    assert out.history_weights.shape[:3] == (rows, t, layers)
    assert out.history_attentions.shape[:3] == (rows, t, layers)
    assert (out.region_attentions is None) == (options.get("strategy") == "ohc")  # ohc's final pass sees no regions
    check_against_replay(model, features, mask, out, out.group)


def test_a_decoder_without_attention_weights_reports_none():
    """Vanilla cross attention reports no weights: the fields stay None, nothing fails."""
    model, (features, mask) = make_model(0, 0.6, "vanilla"), regions(3)
    with torch.no_grad():
        out = generate(model, features, mask, GenerationConfig(max_length=5, **OUTPUTS))
    assert out.region_attentions is None and out.history_attentions is None and out.history_weights is None


def test_a_model_that_reports_no_extras_is_a_clear_error():
    model = ScriptedModel({0: {(): {EOS: 1.0}}})
    with pytest.raises(ValueError, match="output_attentions / output_history_weights need a model that reports"):
        generate(model, *scripted_batch(0), GenerationConfig(num_beams=1, output_attentions=True))
