"""Decoders: explicit decoding state, the Transformer and meshed (M2) decoders, the recurrent
Att2in, Up-Down and Look-Back decoders (``lstm.py``)."""
