"""Model configuration (the ``model:`` section of an experiment config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass
class HistoryConfig:
    """``model.history``: options of the context-assisted cross attention (SPEC.md §3).

    strategy: which history the final pass sees — ``chc`` [regions; entries 1..t] (CACA),
    ``ihc`` [regions; entries 1..t-1], ``ohc`` entries 1..t only (Table 5);
    shared: CACA's two passes share LayerNorm and attention weights (``false``: the final pass
    gets its own, Table 6); normalize: history entries go through the reading pass's LayerNorm
    before projection (see ``catcap.models.cross.context_assisted``; ``false`` = the literal
    formula). ``caca`` reads all three, ``light_caca`` strategy and normalize, ``vanilla`` none.
    """

    strategy: Literal["chc", "ihc", "ohc"] = "chc"
    shared: bool = True
    normalize: bool = True


@dataclass
class ModelConfig:
    """Sizes and part names of a captioner. Defaults are the paper's Transformer (SPEC.md §2).

    encoder / decoder / cross_attention name registered parts (``catcap.registry``):
    cross_attention ``vanilla`` (Transformer), ``caca`` (CAT), ``light_caca`` (LightCAT);
    history holds the CACA options;
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
    history: HistoryConfig = field(default_factory=HistoryConfig)

    def __post_init__(self):
        from catcap.config import ConfigError, check_at_least

        check_at_least("model", self, {"feature_dim": 1, "d_model": 1, "num_heads": 1, "encoder_layers": 1,
                                       "decoder_layers": 1, "d_ff": 1, "max_len": 2, "dropout": 0.0})
        if self.dropout >= 1:
            raise ConfigError(f"model.dropout must be < 1 (a probability), found {self.dropout!r}")
        if self.d_model % self.num_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.num_heads ({self.num_heads})")
        from catcap.models.builders import check_parts

        check_parts(self)
