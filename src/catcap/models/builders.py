"""The only place where configs become modules."""

from __future__ import annotations

import inspect
from dataclasses import asdict

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
import catcap.models.decoders.transformer  # noqa: F401  (registers the decoder)
import catcap.models.encoders.transformer  # noqa: F401  (registers the encoder)
from catcap.models.captioner import Captioner
from catcap.models.config import HistoryConfig, ModelConfig
from catcap.registry import CROSS_ATTENTION, DECODERS, ENCODERS


def check_parts(cfg: ModelConfig) -> None:
    """The named encoder, decoder and cross attention are registered, and the ``model.history``
    options suit the cross attention (at config time, before any data or weights)."""
    ENCODERS.get(cfg.encoder)
    DECODERS.get(cfg.decoder)
    cross_attention_factory(cfg)


def cross_attention_factory(cfg: ModelConfig):
    """A function making one cross-attention module of the configured variant per decoder
    layer, given the ``model.history`` options the variant takes; options it does not take
    must stay at their defaults (else a ConfigError: a silently ignored option would make an
    ablation lie)."""
    from catcap.config import ConfigError

    cls = CROSS_ATTENTION.get(cfg.cross_attention)
    accepted = inspect.signature(cls.__init__).parameters
    options, defaults = asdict(cfg.history), asdict(HistoryConfig())
    for key, value in options.items():
        if key not in accepted and value != defaults[key]:
            raise ConfigError(f"model.history.{key}={value!r} has no effect on cross_attention {cfg.cross_attention!r}; "
                              f"remove it or pick a variant that uses it (caca reads strategy and shared, light_caca reads strategy)")
    kwargs = {k: v for k, v in options.items() if k in accepted}
    return lambda: cls(cfg.d_model, cfg.num_heads, cfg.dropout, **kwargs)


def build_captioner(cfg: ModelConfig, vocab_size: int, *, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> Captioner:
    """Encoder + decoder + cross attention named by ``cfg``, sized by ``cfg``."""
    encoder = ENCODERS.get(cfg.encoder)(cfg.feature_dim, cfg.d_model, cfg.num_heads, cfg.encoder_layers, cfg.d_ff, cfg.dropout)
    decoder = DECODERS.get(cfg.decoder)(
        vocab_size, cfg.d_model, cfg.num_heads, cfg.decoder_layers, cfg.d_ff, cfg.dropout,
        cross_attention_factory(cfg), max_len=cfg.max_len, pad_id=pad_id)
    return Captioner(encoder, decoder, bos_id=bos_id, eos_id=eos_id, pad_id=pad_id)
