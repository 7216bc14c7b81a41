"""The ONNX Runtime path of the image encoders (``catcap extract --backend onnx``).

The same network as :class:`~catcap.features.efficientnet.ImageEncoder` (BatchNorm folded, same
weights, same preprocessing) is exported once to ONNX with PyTorch's exporter and run by ONNX
Runtime, which is several times faster than eager PyTorch for these depthwise-convolution
networks on a CPU (see ``benchmarks/results/extract.md``).

- **Export cache**: ``<cache>/onnx/<encoder>-torch<version>-<hash>.onnx``, where ``<cache>`` is
  catcap's cache folder (``$CATCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/catcap``, else ``~/.cache/catcap``), and the hash covers the folded weights; a new
  torch release or other weights give a new file. Written atomically (a temporary file renamed).
  Exporting needs the packages ``onnx`` and ``onnxscript`` (``pip install "catcap[onnx]"``);
  running a cached file needs only ``onnxruntime``.
- **Checked at start**: the session's output on a fixed input is compared with PyTorch's; a
  difference above ``1e-3`` (outputs go up to 6) is an error rather than silently different
  features. Measured differences are ~3e-5.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import logging
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from catcap.atomic import atomic_path
from catcap.features.efficientnet import EncoderError, ImageEncoder

CHECK_TOLERANCE = 1e-3
ONNX_HELP = 'the ONNX path needs onnxruntime, onnx and onnxscript: pip install "catcap[onnx]"'


def cache_dir() -> Path:
    """Where exported models are kept: ``<catcap's cache>/onnx`` (:func:`catcap.cache.cache_root`)."""
    from catcap.cache import cache_root

    return cache_root() / "onnx"


class _GridNet(torch.nn.Module):
    """(B, 3, S, S) -> the last conv stage (B, C, H, W): the graph that is exported."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net.extract_features(images)


def _weights_hash(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def export_onnx(encoder: ImageEncoder, path: Path) -> Path:
    """Export ``encoder``'s grid network to ``path`` (dynamic batch size), atomically."""
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]  # the exporter needs both
    if missing:
        raise EncoderError(f"cannot export {encoder.name} to ONNX (missing: {', '.join(missing)}); {ONNX_HELP}")
    size = encoder.input_size
    example = torch.zeros(2, 3, size, size)
    with atomic_path(path) as tmp, _quiet_exporter():
        torch.onnx.export(_GridNet(encoder.net).eval(), (example,), str(tmp), dynamo=True,
                          input_names=["images"], output_names=["fmap"],
                          dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False)
    return path


@contextlib.contextmanager
def _quiet_exporter():
    """The exporter prints progress and logs warnings about absent torchvision ops: hide them."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


class OnnxImageEncoder:
    """:class:`ImageEncoder`'s interface (``name``, ``input_size``, ``channels``, ``grid``, ``meta``,
    ``preprocess``, ``boxes``, ``__call__``) with the network run by ONNX Runtime.

    ``threads``: ONNX Runtime's intra-op threads (default: ``torch.get_num_threads()``).
    """

    def __init__(self, name: str = "efficientnet-lite0", *, threads: Optional[int] = None,
                 cache: Optional[Path] = None):
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise EncoderError(f"--backend onnx: {err}; {ONNX_HELP}") from None
        self.torch_encoder = ImageEncoder(name)
        self.name, self.input_size = name, self.torch_encoder.input_size
        self.channels, self.grid = self.torch_encoder.channels, self.torch_encoder.grid
        tag = f"{name}-torch{torch.__version__.split('+')[0]}-{_weights_hash(self.torch_encoder.net)}"
        self.model_path = (cache or cache_dir()) / f"{tag}.onnx"
        if not self.model_path.exists():
            export_onnx(self.torch_encoder, self.model_path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or torch.get_num_threads()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(self.model_path), options, providers=["CPUExecutionProvider"])
        self.max_difference = self._check_against_torch()

    @property
    def meta(self) -> dict:
        """The torch encoder's meta, unchanged: both backends compute the same features (to ~3e-5),
        so a file started with one may be continued with the other."""
        return self.torch_encoder.meta

    def preprocess(self, image):
        return self.torch_encoder.preprocess(image)

    def boxes(self, width: int, height: int) -> np.ndarray:
        return self.torch_encoder.boxes(width, height)

    def _run(self, batch: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) -> (B, C, H, W) through the ONNX session."""
        self.torch_encoder._check(batch)
        array = np.ascontiguousarray(batch.detach().cpu().numpy(), dtype=np.float32)
        return torch.from_numpy(self.session.run(["fmap"], {"images": array})[0])

    def __call__(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, 3, S, S) -> grid (B, H*W, C) and pooled (B, C), as :meth:`ImageEncoder.forward`."""
        grid = self._run(batch).flatten(2).transpose(1, 2)
        return grid, grid.mean(dim=1)

    def _check_against_torch(self) -> float:
        """Max |onnx - torch| on a fixed input; an error when above ``CHECK_TOLERANCE``."""
        size = self.input_size
        probe = torch.linspace(-1.0, 1.0, 2 * 3 * size * size).reshape(2, 3, size, size)
        probe = probe + 0.5 * torch.sin(torch.arange(probe.numel()).float() * 0.37).reshape(probe.shape)
        with torch.inference_mode():
            expected, _ = self.torch_encoder(probe)
        found, _ = self(probe)
        diff = float((found - expected).abs().max())
        if not diff <= CHECK_TOLERANCE:
            raise EncoderError(f"the ONNX model {self.model_path} gives features that differ from PyTorch's by "
                               f"{diff:.3g} (expected <= {CHECK_TOLERANCE}); delete the file to export it "
                               "again, or use --backend torch")
        return diff


def make_encoder(name: str, backend: str = "torch", *, threads: Optional[int] = None):
    """``backend`` ``torch`` -> :class:`ImageEncoder`, ``onnx`` -> :class:`OnnxImageEncoder`."""
    if backend == "torch":
        return ImageEncoder(name)
    if backend == "onnx":
        return OnnxImageEncoder(name, threads=threads)
    raise EncoderError(f"unknown backend {backend!r}: expected 'torch' or 'onnx' (e.g. --backend onnx)")
