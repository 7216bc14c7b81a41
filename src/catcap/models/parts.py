"""The registered parts a model config names, and what the config may say about them.

Imports every part module (so that the registries are filled) and nothing of the config
layer: ``models/config.py`` checks a config here when it is built, ``builders.py`` wires the
parts. Which encoder levels a decoder reads, and so how many history weights each decoder
layer reports, is decided here once (:func:`memory_levels`, :func:`history_heads`).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
import catcap.models.decoders.transformer  # noqa: F401  (registers the decoders)
import catcap.models.encoders.transformer  # noqa: F401  (registers the encoders)
from catcap.registry import CROSS_ATTENTION, DECODERS, ENCODERS

#: which model.history options each variant reads, for the error message
_READS = "caca reads strategy, shared, normalize and placement; light_caca reads strategy and normalize"


def check_parts(cfg) -> None:
    """The named encoder, decoder and cross attention are registered, and the ``model.history``
    options suit them (at config time, before any data or weights). ``cfg`` a ModelConfig."""
    from catcap.config import ConfigError

    ENCODERS.get(cfg.encoder)
    DECODERS.get(cfg.decoder)
    cross_options(cfg)
    if cfg.history.placement != "per_level" and not DECODERS.get(cfg.decoder).meshed:
        raise ConfigError(f"model.history.placement={cfg.history.placement!r} has no effect with decoder "
                          f"{cfg.decoder!r}, which reads one encoder level; use model.decoder=meshed (M2) or remove it")


def cross_options(cfg) -> dict:
    """The ``model.history`` options the configured cross attention takes; an option it does
    not take must stay at its default (else a ConfigError: a silently ignored option would make
    an ablation lie)."""
    from catcap.config import ConfigError

    accepted = inspect.signature(CROSS_ATTENTION.get(cfg.cross_attention).__init__).parameters
    options, defaults = asdict(cfg.history), asdict(type(cfg.history)())
    for key, value in options.items():
        if key not in accepted and value != defaults[key]:
            raise ConfigError(f"model.history.{key}={value!r} has no effect on cross_attention {cfg.cross_attention!r}; "
                              f"remove it or pick a variant that uses it ({_READS})")
    return {k: v for k, v in options.items() if k in accepted}


def encoder_levels(cfg) -> int:
    """How many levels the configured encoder's memory has (all its layers, or its top one)."""
    return cfg.encoder_layers if ENCODERS.get(cfg.encoder).keeps_all_levels else 1


def memory_levels(cfg) -> int:
    """How many encoder levels each decoder layer's cross attention reads: all the encoder
    keeps for a meshed decoder (M2), else the top one."""
    return encoder_levels(cfg) if DECODERS.get(cfg.decoder).meshed else 1


def history_heads(cfg) -> int:
    """History weights per decoder layer (the AWC betas' second axis): one per head and level
    read (level-heads, see ``catcap.models.attention``)."""
    return cfg.num_heads * memory_levels(cfg)


#: the paper's names of (decoder, cross attention) pairs
_NAMES = {("transformer", "vanilla"): "Transformer", ("transformer", "caca"): "CAT", ("transformer", "light_caca"): "LightCAT",
          ("meshed", "vanilla"): "M2", ("meshed", "caca"): "M2 + CACA", ("meshed", "light_caca"): "M2 + LightCACA"}


def model_name(cfg) -> str:
    """The paper's name of the configured captioner (e.g. ``CAT``, ``M2 + CACA``), or
    ``decoder/cross_attention`` for a pair the paper does not name."""
    return _NAMES.get((cfg.decoder, cfg.cross_attention), f"{cfg.decoder}/{cfg.cross_attention}")
