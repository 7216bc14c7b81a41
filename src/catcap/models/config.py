"""Model configuration (the ``model:`` section of an experiment config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional


@dataclass
class HistoryConfig:
    """``model.history``: options of the context-assisted cross attention (SPEC.md §3).

    strategy: which history the final pass sees — ``chc`` [regions; entries 1..t] (CACA),
    ``ihc`` [regions; entries 1..t-1], ``ohc`` entries 1..t only (Table 5);
    shared: CACA's two passes share LayerNorm and attention weights (``false``: the final pass
    gets its own, Table 6); normalize: history entries go through the reading pass's LayerNorm
    before projection (see ``catcap.models.cross.transformer``; ``false`` = the literal
    formula); placement: where CACA's history lives in a meshed (M2) decoder — ``per_level``
    one HCM per encoder level (each level's ``C(Y, X_i)`` becomes a CACA), ``gated`` one HCM of
    the gated first pass shared by every level (docs/m2.md). ``caca`` reads all four,
    ``light_caca`` strategy and normalize, ``vanilla`` none.
    """

    strategy: Literal["chc", "ihc", "ohc"] = "chc"
    shared: bool = True
    normalize: bool = True
    placement: Literal["per_level", "gated"] = "per_level"


@dataclass
class RecurrentConfig:
    """``model.rnn``: sizes and forms of the recurrent (LSTM) decoders that the Transformer's
    fields do not name — word_dim the word embedding width (the anchors' input encoding),
    att_hidden the additive attention's hidden size. The rnn size is ``model.d_model`` (also the
    width of the embedded regions, so that contexts, regions and hidden states share one space).
    maxout (Att2in): the cell input is a two-piece max-out instead of tanh (Rennie et al.'s Att2in,
    self-critical.pytorch's Att2in2); pooled_embedding (Up-Down, Look-Back): the attention LSTM
    reads the mean region feature through its own embedding ``ReLU(W_f mean(R) + b_f)`` (the
    anchors' ``fc_embed``) instead of the mean embedded region (needs ``model.encoder: embed``).
    docs/recurrent.md."""

    word_dim: int = 512
    att_hidden: int = 512
    maxout: bool = False
    pooled_embedding: bool = False


@dataclass
class ModelConfig:
    """Sizes and part names of a captioner. Defaults are the paper's Transformer (SPEC.md §2).

    encoder / decoder / cross_attention name registered parts (``catcap.registry``):
    encoder ``transformer``, ``memory_augmented`` (M2: memory slots, every layer's output kept),
    ``m2`` (the official M2's post-norm encoder) or ``embed`` (each region embedded alone, the
    LSTM captioners' encoder);
    decoder ``transformer`` (reads the encoder's top level), ``meshed`` (M2: every level, gated),
    ``m2`` (the official M2's post-norm meshed decoder; docs/m2.md) or a recurrent one — ``att2in``, ``updown``, ``lookback`` (docs/recurrent.md), whose rnn
    size is d_model, whose other sizes are in ``rnn``, which have one attention "layer"
    (decoder_layers must be 1) and read neither num_heads, d_ff nor max_len;
    cross_attention ``vanilla`` (Transformer / M2), ``caca`` (CAT / M2 + CACA), ``light_caca``
    (LightCAT / M2 + LightCACA); history holds the CACA options; memory_slots the learnable
    slots per head of the encoder's self-attention (None: the encoder's default, 40 for
    ``memory_augmented``, 0 for ``transformer``);
    feature_dim is the width F of the region features; max_len bounds caption positions;
    region_geometry / region_classes add VLP's box-geometry and class-probability terms to the
    region embedding (encoder ``vlp_regions`` only; docs/vlp.md): region_geometry appends each
    box's normalised corners and area to its features (:mod:`catcap.data.geometry`), so the
    model reads ``input_dim`` = F + 5 numbers per region; region_classes names the catcap image
    encoder (``efficientnet-lite0``...) whose ImageNet head gives each grid cell's class
    probabilities.
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
    memory_slots: Optional[int] = None
    region_geometry: bool = False
    region_classes: Optional[str] = None
    history: HistoryConfig = field(default_factory=HistoryConfig)
    rnn: RecurrentConfig = field(default_factory=RecurrentConfig)

    @property
    def input_dim(self) -> int:
        """Numbers per region the model reads: F, plus the 5 geometry columns when region_geometry."""
        from catcap.data.geometry import GEOMETRY_DIM

        return self.feature_dim + (GEOMETRY_DIM if self.region_geometry else 0)

    def __post_init__(self):
        from catcap.config import ConfigError, check_at_least

        check_at_least("model", self, {"feature_dim": 1, "d_model": 1, "num_heads": 1, "encoder_layers": 1,
                                       "decoder_layers": 1, "d_ff": 1, "max_len": 2, "dropout": 0.0})
        check_at_least("model.rnn", self.rnn, {"word_dim": 1, "att_hidden": 1})
        if self.dropout >= 1:
            raise ConfigError(f"model.dropout must be < 1 (a probability), found {self.dropout!r}")
        if self.d_model % self.num_heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.num_heads ({self.num_heads})")
        if self.memory_slots is not None and self.memory_slots < 0:
            raise ConfigError(f"model.memory_slots must be >= 0 (or null for the encoder's default), found {self.memory_slots!r}")
        from catcap.models.parts import check_parts

        check_parts(self)
