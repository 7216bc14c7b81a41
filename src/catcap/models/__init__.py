"""Captioning models: attention, encoders, decoders, cross-attention variants, captioners."""
