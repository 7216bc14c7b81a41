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


def test_paper_preset_sizes():
    cfg = load_config(Wrapper, CONFIGS / "transformer.yaml").model
    assert cfg == ModelConfig()
    model = build_captioner(cfg, vocab_size=10000)
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 3
    assert model.decoder.layers[0].self_attn.num_heads == 8
    # 2048->512 projection, 3+3 layers of width 512/2048, 10k-word embedding and output
    assert 30e6 < count(model) < 40e6


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
