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
import catcap.models.decoders.aoa  # noqa: F401  (registers AoANet's decoder)
import catcap.models.decoders.lstm  # noqa: F401  (registers the recurrent decoders)
import catcap.models.decoders.transformer  # noqa: F401  (registers the decoders)
import catcap.models.encoders.aoa  # noqa: F401  (registers AoANet's refiner)
import catcap.models.encoders.embed  # noqa: F401  (registers the region embedding)
import catcap.models.encoders.transformer  # noqa: F401  (registers the encoders)
import catcap.models.vlp  # noqa: F401  (registers VLP's region embedding and shared Transformer)
from catcap.models.cross.aoa import HeadAttention
from catcap.models.cross.soft import SoftAttention
from catcap.models.cross.transformer import TransformerCrossAttention
from catcap.registry import CROSS_ATTENTION, DECODERS, ENCODERS

#: which model.history options each variant reads, for the error message
_READS = ("caca reads strategy, shared, normalize and placement (in a recurrent decoder strategy and shared); "
          "light_caca reads strategy and normalize (in a recurrent decoder strategy)")


def recurrent_decoder(name: str) -> bool:
    """Whether decoder ``name`` is an LSTM one (Att2in, Up-Down, Look-Back, AoANet)."""
    return getattr(DECODERS.get(name), "recurrent", False)


def recurrent(cfg) -> bool:
    """Whether the configured decoder is an LSTM one."""
    return recurrent_decoder(cfg.decoder)


def multi_head_recurrent(cfg) -> bool:
    """Whether the configured decoder is an LSTM one that attends with several heads (AoANet)."""
    return recurrent(cfg) and DECODERS.get(cfg.decoder).multi_head


def attention_family(cfg):
    """The attention class of the configured decoder, which every cross-attention variant
    (vanilla, CACA, LightCACA) runs in: multi-head cross attention for the Transformer decoders,
    soft (additive) attention for the LSTM ones, multi-head step attention for AoANet's."""
    if not recurrent(cfg):
        return TransformerCrossAttention
    return HeadAttention if multi_head_recurrent(cfg) else SoftAttention


def check_parts(cfg) -> None:
    """The named encoder, decoder and cross attention are registered, and the ``model.history``
    options suit them (at config time, before any data or weights). ``cfg`` a ModelConfig."""
    from catcap.config import ConfigError

    ENCODERS.get(cfg.encoder)
    DECODERS.get(cfg.decoder)
    cross_options(cfg)
    _check_recurrent(cfg)
    _check_region_terms(cfg)
    if not getattr(DECODERS.get(cfg.decoder), "uses_cross_attention", True) and cfg.cross_attention != "vanilla":
        raise ConfigError(f"model.decoder={cfg.decoder} is one stream over regions and words, with no cross attention "
                          f"to make {cfg.cross_attention!r}: set model.cross_attention=vanilla")
    if cfg.history.placement != "per_level" and not DECODERS.get(cfg.decoder).meshed:
        raise ConfigError(f"model.history.placement={cfg.history.placement!r} has no effect with decoder "
                          f"{cfg.decoder!r}, which reads one encoder level; use model.decoder=meshed or m2 (M2) or remove it")
    if getattr(DECODERS.get(cfg.decoder), "post_norm", False) and not cfg.history.normalize:
        raise ConfigError(f"model.history.normalize=False has no effect with decoder {cfg.decoder!r}: its post-norm "
                          "sub-layers make every history entry (c_tmp, or the query) a LayerNorm output already, the "
                          "paper's entry; remove it")


def _check_region_terms(cfg) -> None:
    """``model.region_geometry`` / ``region_classes`` only with an encoder that embeds them,
    and ``region_classes`` names a catcap image encoder."""
    from catcap.config import ConfigError

    if not (cfg.region_geometry or cfg.region_classes):
        return
    if not getattr(ENCODERS.get(cfg.encoder), "embeds_region_terms", False):
        raise ConfigError(f"model.region_geometry / model.region_classes are terms of VLP's region embedding; "
                          f"encoder {cfg.encoder!r} does not read them: use model.encoder=vlp_regions or remove them")
    from catcap.features.efficientnet import ENCODERS as IMAGE_ENCODERS

    if cfg.region_classes is not None and cfg.region_classes not in IMAGE_ENCODERS:
        raise ConfigError(f"model.region_classes names the image encoder whose ImageNet head gives the class "
                          f"probabilities: one of {', '.join(IMAGE_ENCODERS)}, found {cfg.region_classes!r}; "
                          "or null to leave the class term out")


#: what each ``model.rnn`` option is, for the message that refuses it where it would be ignored
_RNN_OPTIONS = {"word_dim": "is the word embedding width",
                "att_hidden": "sizes additive attention (AoANet attends with dot-product heads: set model.num_heads)",
                "maxout": "makes Att2in's cell input a max-out (model.decoder=att2in)",
                "pooled_embedding": "gives Up-Down's / Look-Back's pooled feature its own embedding "
                                    "(model.decoder=updown or lookback)"}


def _check_recurrent(cfg) -> None:
    """``model.rnn`` only with a recurrent decoder, and only the options that decoder reads; a
    recurrent decoder has one attention layer."""
    from catcap.config import ConfigError

    if recurrent(cfg):
        if cfg.decoder_layers != 1:
            raise ConfigError(f"model.decoder={cfg.decoder} is an LSTM decoder with one attention layer: set "
                              f"model.decoder_layers=1 (found {cfg.decoder_layers}), or start from its preset "
                              f"configs/models/{cfg.decoder}.yaml")
        defaults, reads = asdict(type(cfg.rnn)()), DECODERS.get(cfg.decoder).rnn_options
        for key, value in asdict(cfg.rnn).items():
            if key not in reads and value != defaults[key]:
                raise ConfigError(f"model.rnn.{key}={value!r} {_RNN_OPTIONS[key]}; decoder {cfg.decoder!r} does not "
                                  "read it: remove it")
        if cfg.rnn.pooled_embedding and not getattr(ENCODERS.get(cfg.encoder), "embeds_pooled", False):
            raise ConfigError(f"model.rnn.pooled_embedding needs the region embedding that also embeds the pooled "
                              f"feature: set model.encoder=embed (found {cfg.encoder!r})")
    elif asdict(cfg.rnn) != asdict(type(cfg.rnn)()):
        raise ConfigError(f"model.rnn ({asdict(cfg.rnn)}) sizes the LSTM decoders (att2in, updown, lookback) and "
                          f"has no effect on decoder {cfg.decoder!r}; remove it")


def cross_options(cfg) -> dict:
    """The ``model.history`` options the configured cross attention takes; an option it does
    not take must stay at its default (else a ConfigError: a silently ignored option would make
    an ablation lie)."""
    from catcap.config import ConfigError

    variant = inspect.signature(CROSS_ATTENTION.get(cfg.cross_attention)).parameters
    accepted = set(variant) & attention_family(cfg).history_options
    options, defaults = asdict(cfg.history), asdict(type(cfg.history)())
    for key, value in options.items():
        if key not in accepted and value != defaults[key]:
            where = f" in the recurrent decoder {cfg.decoder!r}" if recurrent(cfg) else ""
            raise ConfigError(f"model.history.{key}={value!r} has no effect on cross_attention {cfg.cross_attention!r}{where}; "
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
    read (level-heads, see ``catcap.models.attention``); 1 for a recurrent decoder's single-head
    soft attention, the heads of AoANet's."""
    if recurrent(cfg):
        return cfg.num_heads if multi_head_recurrent(cfg) else 1
    return cfg.num_heads * memory_levels(cfg)


def history_layers(cfg) -> int:
    """Attention layers with a history (the AWC betas' first axis): the decoder layers, or 1
    for a recurrent decoder (SPEC.md §3: N_layers = 1 for LSTM decoders)."""
    return 1 if recurrent(cfg) else cfg.decoder_layers


#: the paper's names of (decoder, cross attention) pairs
_NAMES = {("transformer", "vanilla"): "Transformer", ("transformer", "caca"): "CAT", ("transformer", "light_caca"): "LightCAT",
          ("meshed", "vanilla"): "M2", ("meshed", "caca"): "M2 + CACA", ("meshed", "light_caca"): "M2 + LightCACA",
          ("m2", "vanilla"): "M2 (official)", ("m2", "caca"): "M2 (official) + CACA",
          ("m2", "light_caca"): "M2 (official) + LightCACA",
          **{(key, cross): name + suffix for key, name in (("att2in", "Att2in"), ("updown", "Up-Down"), ("lookback", "Look-Back"))
             for cross, suffix in (("vanilla", ""), ("caca", " + CACA"), ("light_caca", " + LightCACA"))},
          ("vlp", "vanilla"): "VLP", ("aoa", "vanilla"): "AoANet", ("aoa", "caca"): "AoANet + CACA", ("aoa", "light_caca"): "AoANet + LightCACA"}


def model_name(cfg) -> str:
    """The paper's name of the configured captioner (e.g. ``CAT``, ``M2 + CACA``), or
    ``decoder/cross_attention`` for a pair the paper does not name."""
    return _NAMES.get((cfg.decoder, cfg.cross_attention), f"{cfg.decoder}/{cfg.cross_attention}")
