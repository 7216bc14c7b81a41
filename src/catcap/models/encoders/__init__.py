"""Encoders: feature projection and the Transformer encoder (M2 and AoA refiners later)."""
