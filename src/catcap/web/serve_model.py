"""The model side of ``catcap serve``: one checkpoint loaded once, photos in, captions and
per-word attention out (no web code here; :mod:`catcap.web.serve` is the server).

A photo goes through the image encoder that made the checkpoint's training features (ONNX
Runtime when available, else PyTorch; the same features to ~3e-5), then
:meth:`catcap.Captioner.generate_output` captions it exactly as ``catcap caption`` does, asked
for the attention too (``output_attentions``, ``output_history_weights``). The attention
shown for each word is the data ``catcap analyze`` records (:func:`catcap.viz.history.trace_greedy`):
decoder layer ``layer``'s final-pass weights over the image regions, its history weight
``a_k`` and its weights over the history entries, head-averaged, at the step that chose the
word (for a beam-search caption: the steps of the returned beam, followed through the reorders).

Legend: N regions (grid cells), T output tokens (the words, then ``<eos>``), H heads.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

#: backends of the image encoder: "auto" = ONNX Runtime when installed, else PyTorch
BACKENDS = ("auto", "onnx", "torch")

_LOADS = {"count": 0}  # model loads in this process (the server loads once; /health reports it)
_LOADS_LOCK = threading.Lock()


def model_loads() -> int:
    """How many checkpoints :class:`PhotoCaptioner` has loaded in this process."""
    return _LOADS["count"]


@dataclass
class WordAttention:
    """Per output token (T = words + ``<eos>``) of one caption, one decoder layer, head-averaged.

    regions (T, N) weights over the grid cells, or None when the layer reports none (vanilla
    attention, or ``ohc`` whose final pass sees no regions); history_weight (T,) a_k or None
    without a history memory; history[k] the weights over the history entries visible at step
    k+1, labelled history_labels[k] (their steps' input tokens), or None.
    """

    layer: int
    num_layers: int
    regions: np.ndarray | None
    history_weight: np.ndarray | None
    history: list[np.ndarray] | None
    history_labels: list[list[str]] | None


def word_attention(out, layer: int, num_layers: int, tokens: list[str], own_entry: bool = True) -> WordAttention:
    """The first caption of a :class:`~catcap.decoding.GenerationOutput` made with
    ``output_attentions`` and ``output_history_weights`` -> decoder layer ``layer``'s
    head-averaged :class:`WordAttention` over its T = len(tokens) steps (a field the decoder
    does not report is None). ``own_entry``: step k's history holds its own entry (all but ihc)."""
    steps = len(tokens)

    def per_step(x):  # (R, T, L, H, ...) -> (T, ...) of caption 0, layer ``layer``, head-averaged
        return None if x is None else x[0, :steps, layer].float().mean(1).cpu().numpy()

    regions, maps = per_step(out.region_attentions), per_step(out.history_attentions)
    weights = None if out.history_weights is None else \
        out.history_weights[0, :steps, layer].float().mean(-1).clamp(0.0, 1.0).cpu().numpy()
    inputs = ["<bos>"] + tokens[:-1]
    entries = [k + 1 if own_entry else k for k in range(steps)]
    history = None if maps is None else [maps[k, :entries[k]] for k in range(steps)]
    return WordAttention(
        layer=layer % max(num_layers, 1), num_layers=num_layers, regions=regions, history_weight=weights,
        history=history, history_labels=None if history is None else [inputs[:n] for n in entries])


def make_pixel_encoder(features_meta: dict, backend: str = "auto", device: torch.device | None = None):
    """The image encoder that made a checkpoint's training features (``features_meta``), run by
    ONNX Runtime or PyTorch; returns (encoder, backend used). A clear ValueError when the
    checkpoint's features were not made by a catcap image encoder."""
    from catcap.inference.captioner import pixel_encoder

    if backend not in BACKENDS:
        raise ValueError(f"unknown encoder backend {backend!r}: expected one of {', '.join(BACKENDS)} "
                         "(e.g. --backend onnx)")
    torch_encoder = pixel_encoder(features_meta, device or torch.device("cpu"))  # checks the checkpoint
    if backend == "torch" or (backend == "auto" and importlib.util.find_spec("onnxruntime") is None):
        return torch_encoder, "torch"
    from catcap.features.onnx_backend import OnnxImageEncoder

    try:
        return OnnxImageEncoder(torch_encoder.name), "onnx"
    except ValueError:
        if backend == "onnx":
            raise
        return torch_encoder, "torch"  # auto: ONNX could not be exported or checked here


class PhotoCaptioner:
    """A checkpoint loaded once, captioning PIL photos with per-word attention.

    Thread use: :meth:`caption` runs on the server's worker thread(s); the model is only read.
    """

    def __init__(self, checkpoint: str | Path, *, backend: str = "auto", device: str = "cpu", layer: int = -1,
                 log=print):
        from catcap.inference.captioner import Captioner

        started = time.perf_counter()
        log(f"loading checkpoint {checkpoint} ...")
        self.captioner = Captioner.from_pretrained(checkpoint, device=device)
        with _LOADS_LOCK:
            _LOADS["count"] += 1
        self.checkpoint = str(checkpoint)
        if not self.captioner.reads_pixels:
            raise ValueError(
                f"checkpoint {checkpoint} cannot caption photos: its training features were not made by a "
                f"catcap image encoder (feature store meta: {self.captioner.features_meta or 'none'}); "
                "catcap serve needs a model trained on `catcap extract` features (e.g. "
                "configs/experiments/flickr8k_cat.yaml), whose checkpoint records the encoder")
        self.encoder, self.backend = make_pixel_encoder(self.captioner.features_meta, backend, self.captioner.device)
        self.layer = layer
        cfg = self.captioner.config.model
        from catcap.models.parts import history_layers, model_name

        self.num_layers = history_layers(cfg)  # decoder layers (1 for a recurrent decoder)
        self.info = {"checkpoint": self.checkpoint, "name": model_name(cfg), "cross_attention": cfg.cross_attention,
                     "strategy": cfg.history.strategy, "awc": bool(self.captioner.config.train.awc.enabled),
                     "d_model": cfg.d_model, "encoder": self.encoder.name, "backend": self.backend,
                     "vocabulary": len(self.captioner.vocab)}
        log(f"model {self.info['name']} (D={cfg.d_model}, cross attention {cfg.cross_attention}), image encoder "
            f"{self.encoder.name} on {self.backend}, loaded in {time.perf_counter() - started:.1f} s")

    def features(self, image) -> np.ndarray:
        """One RGB PIL image -> its region features (N, F') as the model reads them."""
        from catcap.inference.captioner import images_to_features

        return images_to_features(self.encoder, [image], self.captioner.device, self.captioner.config.model)[0]

    @torch.no_grad()
    def caption(self, image, generation=None) -> dict:
        """One RGB PIL image -> {caption, words, tokens, attention (WordAttention), boxes (N, 4)
        pixel x1, y1, x2, y2 of the grid cells in this image, timings_ms}; ``generation``: a
        :class:`~catcap.decoding.GenerationConfig` (None: its defaults, beam 3 and 20 words)."""
        from dataclasses import replace

        from catcap.decoding import GenerationConfig

        cap, times = self.captioner, {}
        config = replace(generation or GenerationConfig(), output_attentions=True, output_history_weights=True)
        t0 = time.perf_counter()
        feats = self.features(image)
        t1 = time.perf_counter()
        out = cap.generate_output(features=[feats], config=config)
        [text] = cap.captions(out)
        t2 = time.perf_counter()
        words = text.split()
        tokens = words + ["<eos>"]
        attention = word_attention(out, self.layer, self.num_layers, tokens,
                                   own_entry=cap.config.model.history.strategy != "ihc")
        t3 = time.perf_counter()
        times.update(features=1000 * (t1 - t0), caption=1000 * (t2 - t1), attention=1000 * (t3 - t2))
        return {"caption": text, "words": words, "tokens": tokens, "attention": attention,
                "boxes": self.encoder.boxes(image.width, image.height), "timings_ms": times}
