"""Decoding: greedy, sampling and batched beam search over the cached decoder protocol,
with shared logit processors; ``reference`` holds the uncached oracle used by tests."""

from catcap.decoding.beam import beam_search
from catcap.decoding.greedy import greedy
from catcap.decoding.processors import (BadEndings, DecodeOutput, MinLength, NoRepeatNGram, SuppressEos,
                                        SuppressTokens, build_processors, caption_processors)
from catcap.decoding.sampling import sample

__all__ = ["BadEndings", "DecodeOutput", "MinLength", "NoRepeatNGram", "SuppressEos", "SuppressTokens",
           "beam_search", "build_processors", "caption_processors", "greedy", "sample"]
