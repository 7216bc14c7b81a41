"""Model configuration (the ``model:`` section of an experiment config)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelConfig:
    """Sizes and part names of a captioner. Defaults are the paper's Transformer (SPEC.md §2).

    encoder / decoder / cross_attention name registered parts (``catcap.registry``);
    feature_dim is the width F of the region features; max_len bounds caption positions.
    """

    encoder: str = "transformer"
    decoder: str = "transformer"
    cross_attention: str = "vanilla"
    feature_dim: int = 2048
    d_model: int = 512
    num_heads: int = 8
    encoder_layers: int = 3
    decoder_layers: int = 3
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 64

    def __post_init__(self):
        if self.d_model % self.num_heads:
            from catcap.config import ConfigError

            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.num_heads ({self.num_heads})")
