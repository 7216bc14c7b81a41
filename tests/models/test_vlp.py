"""VLP's one-stream model: the two self-attention masks written out by hand, and captioning as a
decoder equal to the one-stream definition (the whole sequence ``[CLS] r [SEP] w_<t [MASK]``
through every layer under the seq2seq mask). The shared decoder contract covers the rest in
test_decoder_contract.py and tests/decoding/test_beam.py."""

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

from catcap.config import ConfigError
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig
from catcap.models.parts import model_name
from catcap.models.vlp import vlp_attention_mask

# positions: [CLS] r_1 r_2(padded) [SEP] | w_1 w_2 w_3(padded)
IMAGE = torch.tensor([[1, 1, 0, 1]], dtype=torch.bool)
TEXT = torch.tensor([[1, 1, 0]], dtype=torch.bool)


def test_bidirectional_mask_by_hand():
    expected = [
        [1, 1, 0, 1, 1, 1, 0],  # [CLS] sees every real position
        [1, 1, 0, 1, 1, 1, 0],  # r_1
        [0, 0, 1, 0, 0, 0, 0],  # padded r_2: itself only
        [1, 1, 0, 1, 1, 1, 0],  # [SEP]
        [1, 1, 0, 1, 1, 1, 0],  # w_1 sees w_2 too
        [1, 1, 0, 1, 1, 1, 0],  # w_2
        [0, 0, 0, 0, 0, 0, 1],  # padded w_3
    ]
    assert vlp_attention_mask(IMAGE, TEXT, "bidirectional")[0].int().tolist() == expected


def test_seq2seq_mask_by_hand():
    expected = [
        [1, 1, 0, 1, 0, 0, 0],  # the image part sees the image part only
        [1, 1, 0, 1, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0],
        [1, 1, 0, 1, 0, 0, 0],
        [1, 1, 0, 1, 1, 0, 0],  # w_1 sees the image and w_1
        [1, 1, 0, 1, 1, 1, 0],  # w_2 sees the image, w_1 and w_2
        [0, 0, 0, 0, 0, 0, 1],
    ]
    assert vlp_attention_mask(IMAGE, TEXT, "seq2seq")[0].int().tolist() == expected


def test_unknown_mask_kind_is_refused():
    with pytest.raises(ValueError, match="one of bidirectional, seq2seq, got 'causal'"):
        vlp_attention_mask(IMAGE, TEXT, "causal")


@torch.no_grad()
def test_generation_equals_the_one_stream_sequence_with_a_mask_appended():
    """At step t the cached decoder's logits are those of [MASK] in the full sequence
    ``[CLS] r [SEP] w_1..w_{t-1} [MASK]`` run through every layer under the seq2seq mask."""
    model = tiny_captioner("vlp")
    dec = model.decoder
    features = torch.randn(2, 4, F)
    fmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    words = torch.tensor([[5, 6, 7], [8, 9, 10]])
    memory, mask = model.encode(features, fmask)
    state = model.init_state(memory, mask, 1)
    tokens = torch.tensor([1, 1])  # <bos>: the empty prefix
    for t in range(1, 4):
        logits, state = model.step(tokens, state)
        image, image_mask = dec.image_inputs(memory[:, 0], mask)
        positions = torch.arange(1, t + 1)
        text = torch.cat([dec.text_inputs(words[:, :t - 1], positions[:-1]),
                          dec.text_inputs(None, positions[-1:]).expand(2, -1, -1)], 1)
        x = torch.cat([image, text], 1)
        allowed = vlp_attention_mask(image_mask, torch.ones(2, t, dtype=torch.bool), "seq2seq")
        for layer in dec.layers:
            x = layer(x, allowed)
        torch.testing.assert_close(logits, dec.output(dec.norm(x[:, -1])), rtol=1e-5, atol=1e-5)
        tokens = words[:, t - 1]


def test_config_builds_names_and_refuses_cross_attention_variants():
    cfg = ModelConfig(encoder="vlp_regions", decoder="vlp", feature_dim=F, d_model=16, num_heads=2, decoder_layers=2,
                      d_ff=32)
    model = build_captioner(cfg, 30)
    assert type(model.decoder).__name__ == "VLPDecoder" and len(model.decoder.layers) == 2
    assert model_name(cfg) == "VLP"
    with pytest.raises(ConfigError, match="no cross attention to make 'caca': set model.cross_attention=vanilla"):
        ModelConfig(encoder="vlp_regions", decoder="vlp", cross_attention="caca", feature_dim=F, d_model=16, num_heads=2)
