"""The only place where configs become modules."""

from __future__ import annotations

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
import catcap.models.decoders.transformer  # noqa: F401  (registers the decoder)
import catcap.models.encoders.transformer  # noqa: F401  (registers the encoder)
from catcap.models.captioner import Captioner
from catcap.models.config import ModelConfig
from catcap.registry import CROSS_ATTENTION, DECODERS, ENCODERS


def build_captioner(cfg: ModelConfig, vocab_size: int, *, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> Captioner:
    """Encoder + decoder + cross attention named by ``cfg``, sized by ``cfg``."""
    cross = CROSS_ATTENTION.get(cfg.cross_attention)
    encoder = ENCODERS.get(cfg.encoder)(cfg.feature_dim, cfg.d_model, cfg.num_heads, cfg.encoder_layers, cfg.d_ff, cfg.dropout)
    decoder = DECODERS.get(cfg.decoder)(
        vocab_size, cfg.d_model, cfg.num_heads, cfg.decoder_layers, cfg.d_ff, cfg.dropout,
        lambda: cross(cfg.d_model, cfg.num_heads, cfg.dropout), max_len=cfg.max_len, pad_id=pad_id)
    return Captioner(encoder, decoder, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
