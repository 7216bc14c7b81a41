"""Validation leaves the global RNG (the training's dropout stream) where it was."""

import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.data.datasets import ImageDataset
from catcap.data.features import open_feature_store
from catcap.data.karpathy import load_karpathy
from catcap.data.synthetic import make_world
from catcap.decoding import GenerationConfig
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig
from catcap.training.validate import decode_tokens


def test_validation_draws_nothing_from_the_global_rng(tmp_path):
    world = make_world(tmp_path / "w", num_train=2, num_val=6, num_test=1, seed=1, feature_dim=12, progress=False)
    dataset = ImageDataset(load_karpathy(world.dataset, ["val"])["val"], open_feature_store(world.features))
    model = build_captioner(ModelConfig(feature_dim=12, d_model=16, num_heads=2, encoder_layers=1, decoder_layers=1,
                                        d_ff=32), 30)
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    rows = decode_tokens(model, dataset, torch.device("cpu"), 4, GenerationConfig(num_beams=1, max_length=5))
    assert len(rows) == 6  # two batches, so two loader passes would have drawn twice
    assert torch.equal(torch.rand(3), want)
