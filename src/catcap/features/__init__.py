"""Image -> feature tensors: pretrained image encoders and batch extraction into a feature store.

Depends on nothing else in catcap except the feature-store writer (:mod:`catcap.data.features`);
torch, PIL and numpy only. Importing this package is light: the encoder network is built when
:class:`ImageEncoder` is instantiated.

* :class:`ImageEncoder` (``efficientnet-lite0|lite1|lite2``): ``preprocess``, ``forward`` -> grid
  (B, H*W, C) + pooled (B, C), ``classify`` -> ImageNet logits.
* :class:`OnnxImageEncoder`: the same network run by ONNX Runtime (``backend="onnx"``), exported
  once into a cache and checked against PyTorch at start.
* :func:`extract_features`: a folder or list of images -> an HDF5 feature file (resumable,
  unreadable images listed and skipped).
"""

from catcap.features.efficientnet import ENCODERS, EncoderError, ImageEncoder
from catcap.features.extract import ExtractResult, extract_features, list_images
from catcap.features.onnx_backend import OnnxImageEncoder, make_encoder

__all__ = ["ENCODERS", "EncoderError", "ExtractResult", "ImageEncoder", "OnnxImageEncoder", "extract_features",
           "list_images", "make_encoder"]
