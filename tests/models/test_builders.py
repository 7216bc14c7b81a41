"""Model builders: the presets build the architecture they name, with the exact size.

Oracle: the parameter count of the paper preset worked out layer by layer from the
Transformer's definition (``paper_transformer_parameters``); the shipped configs are checked by
loading and building each (their parts are the registered classes the config names)."""

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from catcap.config import ConfigError, load_config
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig
from catcap.registry import DECODERS, ENCODERS, UnknownName
from catcap.training.experiment import ExperimentConfig

CONFIGS = Path(__file__).parents[2] / "configs" / "models"


@dataclass
class Wrapper:
    model: ModelConfig = field(default_factory=ModelConfig)


def count(model):
    return sum(p.numel() for p in model.parameters())


def paper_transformer_parameters(features: int, d: int, d_ff: int, layers: int, vocab: int) -> int:
    """The parameter count of the pre-norm Transformer captioner, layer by layer from its
    definition (SPEC.md): every Linear has a bias, every LayerNorm a gain and a bias, positions
    are sinusoidal (no parameters), the output layer is not tied to the embedding."""
    linear = lambda n_in, n_out: n_in * n_out + n_out  # noqa: E731
    norm = 2 * d
    attention = 4 * linear(d, d)  # query, key, value and output projections
    ffn = linear(d, d_ff) + linear(d_ff, d)
    projection = linear(features, d) + norm  # region features -> D, then LayerNorm
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = attention + (norm + attention) + ffn + 2 * norm  # self, cross (own LayerNorm), FFN
    encoder = projection + layers * encoder_layer + norm
    decoder = vocab * d + layers * decoder_layer + norm + linear(d, vocab)
    return encoder + decoder


def test_paper_preset_sizes():
    cfg = load_config(Wrapper, CONFIGS / "transformer.yaml").model
    assert cfg == ModelConfig()
    model = build_captioner(cfg, vocab_size=10000)
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 3
    assert model.decoder.layers[0].self_attn.num_heads == 8
    assert count(model) == paper_transformer_parameters(features=2048, d=512, d_ff=2048, layers=3, vocab=10000)


def test_tiny_preset_and_errors():
    tiny = load_config(Wrapper, CONFIGS / "tiny.yaml", ["model.feature_dim=12"]).model
    assert count(build_captioner(tiny, vocab_size=50)) < 1e6
    with pytest.raises(UnknownName, match="unknown cross_attention 'nope'; choose one of: caca, light_caca, vanilla"):
        build_captioner(ModelConfig(cross_attention="nope"), 50)
    with pytest.raises(ConfigError, match="divisible"):
        load_config(Wrapper, None, ["model.num_heads=7"])


@pytest.mark.parametrize("path", sorted(CONFIGS.parent.glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_shipped_config_loads_and_its_model_builds(path):
    """Every preset, experiment and ablation config is valid as shipped (unknown keys, types and
    part options are checked on load), and its model builds (at a vocabulary of 50)."""
    cfg = load_config(ExperimentConfig, path)
    model = build_captioner(cfg.model, 50)
    assert type(model.encoder) is ENCODERS.get(cfg.model.encoder) and type(model.decoder) is DECODERS.get(cfg.model.decoder)
    assert model.decoder.output.out_features == 50
