"""catcap: image captioning with the Context-Assisted Transformer (CAT).

Importing ``catcap`` loads nothing heavy; import the layer you need
(``catcap.metrics``, ...). See docs/architecture.md for the layers.
"""

__version__ = "0.1.0.dev0"
