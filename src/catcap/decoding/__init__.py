"""Decoding: one generation loop (:func:`generate`) for greedy decoding, sampling, beam and
diverse beam search, configured by a :class:`GenerationConfig`, with shared logit processors;
``reference`` and ``reference_diverse`` hold the uncached oracles used by tests."""

from catcap.decoding.config import GenerationConfig, GenerationConfigError, build_generation_config
from catcap.decoding.generate import beam_search, generate, greedy, sample
from catcap.decoding.output import GenerationOutput
from catcap.decoding.processors import (BadEndings, MinLength, NoRepeatNGram, SuppressEos, SuppressTokens,
                                        build_processors, caption_processors)

__all__ = ["BadEndings", "GenerationConfig", "GenerationConfigError", "GenerationOutput", "MinLength",
           "NoRepeatNGram", "SuppressEos", "SuppressTokens", "beam_search", "build_generation_config",
           "build_processors", "caption_processors", "generate", "greedy", "sample"]
