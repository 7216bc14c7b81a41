"""Decoders: explicit decoding state, Transformer decoder (LSTM and meshed decoders later)."""
