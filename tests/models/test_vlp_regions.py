"""VLP's region embedding r_i = W_r R_i + W_p [LN(W_c C_i) | LN(W_g G_i)] (catcap.models.vlp.VLPRegions).

Oracles: the image encoder's own ImageNet classifier (the mean of the per-cell class logits must
be its logits for the photo, since pooling and the last layer are linear), and the terms worked
out from the module's parameters by hand."""

import pytest
import torch

from catcap.config import ConfigError
from catcap.features.efficientnet import ImageEncoder
from catcap.models.builders import build_encoder
from catcap.models.config import ModelConfig
from catcap.models.vlp import VLPRegions


def test_no_terms_is_the_plain_projection():
    torch.manual_seed(0)
    enc = VLPRegions(6, 8, 2, 1, 16, 0.0)
    x = torch.randn(2, 3, 6)
    assert enc.mix is None and enc.geometry is None and enc.classes is None
    torch.testing.assert_close(enc(x, torch.ones(2, 3, dtype=torch.bool))[:, 0], enc.project(x))


def test_geometry_term_by_hand_and_it_changes_the_embedding():
    torch.manual_seed(0)
    enc = VLPRegions(6, 8, 2, 1, 16, 0.0, region_geometry=True)
    x = torch.randn(2, 3, 6 + 5)
    out = enc(x, torch.ones(2, 3, dtype=torch.bool))[:, 0]
    lin, norm = enc.geometry
    g = torch.nn.functional.layer_norm(x[..., 6:] @ lin.weight.T + lin.bias, (8,), norm.weight, norm.bias)
    expected = x[..., :6] @ enc.project.weight.T + enc.project.bias + g @ enc.mix.weight.T + enc.mix.bias
    torch.testing.assert_close(out, expected)
    moved = x.clone()
    moved[..., 6:] = torch.rand(2, 3, 5)
    assert not torch.allclose(enc(moved, torch.ones(2, 3, dtype=torch.bool)), out[:, None])


@pytest.fixture(scope="module")
def lite0():
    return ImageEncoder("efficientnet-lite0")


def test_class_probabilities_are_the_image_encoders_imagenet_head_per_cell(lite0):
    torch.manual_seed(0)
    enc = VLPRegions(1280, 16, 2, 1, 32, 0.0, region_classes="efficientnet-lite0")
    photos = torch.rand(2, 3, 224, 224)
    with torch.inference_mode():
        grid, _ = lite0(photos)
        logits = lite0.classify(photos)
        cell_logits = grid @ enc.class_weight.T + enc.class_bias
        probs = enc.class_probabilities(grid)
    torch.testing.assert_close(cell_logits.mean(1), logits, atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 49))
    assert probs.shape == (2, 49, 1000)
    assert "class_weight" in enc.state_dict() and not any("class_" in n for n, _ in enc.named_parameters())


def test_both_terms_are_mixed_by_one_projection():
    enc = VLPRegions(1280, 16, 2, 1, 32, 0.0, region_geometry=True, region_classes="efficientnet-lite0")
    assert enc.mix.in_features == 32 and enc.mix.out_features == 16
    out = enc(torch.rand(1, 4, 1285), torch.ones(1, 4, dtype=torch.bool))
    assert out.shape == (1, 1, 4, 16)


def test_a_class_head_of_another_width_is_refused():
    with pytest.raises(ValueError, match="classifies 1280-d grid cells, but the features are 2048-d"):
        VLPRegions(2048, 16, 2, 1, 32, 0.0, region_classes="efficientnet-lite0")


def test_config_routes_the_terms_and_refuses_them_elsewhere():
    cfg = ModelConfig(encoder="vlp_regions", decoder="vlp", feature_dim=10, d_model=16, num_heads=2, region_geometry=True)
    assert cfg.input_dim == 15 and build_encoder(cfg).geometry is not None
    assert ModelConfig(feature_dim=10).input_dim == 10
    with pytest.raises(ConfigError, match="encoder 'transformer' does not read them"):
        ModelConfig(region_geometry=True)
    with pytest.raises(ConfigError, match="one of efficientnet-lite0.*found 'resnet'"):
        ModelConfig(encoder="vlp_regions", decoder="vlp", region_classes="resnet")
