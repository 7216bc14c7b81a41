"""The only place where configs become modules."""

from __future__ import annotations

from catcap.models.caption_model import CaptionModel
from catcap.models.config import ModelConfig
from catcap.models.parts import attention_family, cross_options, encoder_levels, multi_head_recurrent, recurrent
from catcap.registry import CROSS_ATTENTION, DECODERS, ENCODERS


def history_strategy(cfg: ModelConfig):
    """The configured variant: a ContextAssist (CACA, LightCACA) with the ``model.history``
    options it takes, or None (vanilla)."""
    return CROSS_ATTENTION.get(cfg.cross_attention)(**cross_options(cfg))


def cross_attention_factory(cfg: ModelConfig):
    """A function making one Transformer-decoder cross attention of the configured variant
    around a given mix (the decoder's choice of encoder levels)."""
    history = history_strategy(cfg)
    return lambda mix, post_norm=False: attention_family(cfg)(cfg.d_model, cfg.num_heads, cfg.dropout, mix=mix,
                                                              history=history, post_norm=post_norm)


def build_encoder(cfg: ModelConfig):
    """The configured encoder; ``model.memory_slots`` None keeps the encoder's own default; the
    region terms (``model.region_geometry`` / ``region_classes``) go to encoders that embed them."""
    options = {} if cfg.memory_slots is None else {"memory_slots": cfg.memory_slots}
    options.update({k: v for k, v in (("region_geometry", cfg.region_geometry),
                                      ("region_classes", cfg.region_classes),  # VLP's region terms
                                      ("pooled", cfg.rnn.pooled_embedding)) if v})  # Up-Down's pooled feature
    return ENCODERS.get(cfg.encoder)(cfg.feature_dim, cfg.d_model, cfg.num_heads, cfg.encoder_layers, cfg.d_ff,
                                     cfg.dropout, **options)


def soft_attention_factory(cfg: ModelConfig):
    """A function making a recurrent decoder's attention of the configured variant: soft
    attention (``look_back``: Look-Back's query also reads the previous context), or AoANet's
    multi-head step attention."""
    cls, history = attention_family(cfg), history_strategy(cfg)
    if multi_head_recurrent(cfg):  # AoANet: dot-product heads (no Look-Back query)
        return lambda look_back: cls(cfg.d_model, cfg.num_heads, history=history)
    return lambda look_back: cls(cfg.d_model, cfg.rnn.att_hidden, look_back=look_back, history=history)


def build_decoder(cfg: ModelConfig, vocab_size: int, pad_id: int = 0):
    """The configured decoder: a Transformer one (sized by d_model, heads, layers, d_ff) or a
    recurrent one (rnn size d_model, ``model.rnn`` sizes)."""
    cls = DECODERS.get(cfg.decoder)
    if recurrent(cfg):
        core = {k: v for k, v in (("maxout", cfg.rnn.maxout), ("pooled_embedding", cfg.rnn.pooled_embedding)) if v}
        return cls(vocab_size, cfg.d_model, cfg.rnn.word_dim, cfg.dropout, soft_attention_factory(cfg), pad_id=pad_id,
                   **core)
    return cls(vocab_size, cfg.d_model, cfg.num_heads, cfg.decoder_layers, cfg.d_ff, cfg.dropout,
               cross_attention_factory(cfg), max_len=cfg.max_len, pad_id=pad_id, memory_levels=encoder_levels(cfg))


def build_captioner(cfg: ModelConfig, vocab_size: int, *, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> CaptionModel:
    """Encoder + decoder + cross attention named by ``cfg``, sized by ``cfg``."""
    return CaptionModel(build_encoder(cfg), build_decoder(cfg, vocab_size, pad_id), bos_id=bos_id, eos_id=eos_id,
                     pad_id=pad_id)
