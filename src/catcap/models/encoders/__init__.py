"""Encoders: feature projection, the Transformer and memory-augmented (M2) encoders, and the
recurrent captioners' region embedding (``embed.py``); the AoA refiner later."""
