"""catcap: image captioning with the Context-Assisted Transformer (CAT).

Importing ``catcap`` loads nothing heavy; import the layer you need
(``catcap.metrics``, ...). See docs/architecture.md for the layers.
"""

__version__ = "0.1.0.dev0"


def __getattr__(name):  # lazy: ``import catcap`` stays light, ``catcap.Captioner`` loads torch
    if name == "Captioner":
        from catcap.inference.captioner import Captioner

        return Captioner
    if name == "configure_threads":  # call before `import torch` (catcap/threads.py; loads no torch)
        from catcap.threads import configure_threads

        return configure_threads
    raise AttributeError(f"module 'catcap' has no attribute {name!r}")
