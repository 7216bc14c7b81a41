"""The model side of ``catcap serve``: one checkpoint loaded once, photos in, captions and
per-word attention out (no web code here; :mod:`catcap.web.serve` is the server).

A photo goes through the image encoder that made the checkpoint's training features (ONNX
Runtime when available, else PyTorch; the same features to ~3e-5), then
:meth:`catcap.Captioner.generate` captions it exactly as ``catcap caption`` does. The attention
shown for each word is the data ``catcap analyze`` records (:func:`catcap.viz.history.trace_greedy`):
decoder layer ``layer``'s final-pass weights over the image regions, its history weight
``a_k`` and its weights over the history entries, head-averaged. They are recorded by feeding
the chosen caption back through ``decoder.step`` one token at a time (the caption is forced,
so a beam-search caption gets the attention its own steps had; for greedy captions this is
exactly ``trace_greedy``'s record).

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


def _mean_heads(x: torch.Tensor | None) -> torch.Tensor | None:
    """(R, H, 1, M) step attention -> (R, M) head average (None stays None)."""
    return None if x is None else x[:, :, 0].float().mean(1)


@torch.no_grad()
def forced_trace(model, features: torch.Tensor, feature_mask: torch.Tensor, tokens: list[int],
                 layer: int = -1) -> tuple[list[dict], int]:
    """Feed ``<bos>, tokens[:-1]`` through ``model.decoder.step`` (one image: features (1, N, F),
    mask (1, N)) and keep decoder layer ``layer``'s extras at each of the len(tokens) steps,
    reduced to one image and head-averaged: dicts with ``history_weight`` (float), ``region``
    (N,) and ``history`` (M_k,) (absent keys: the layer does not report them). Returns
    (per-step dicts, number of layers)."""
    model.eval()
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, group=1)
    feed = torch.tensor([model.bos_id] + tokens[:-1], dtype=torch.long, device=features.device)
    steps, layers = [], 0
    for k in range(len(tokens)):
        _, state, extras = model.decoder.step(feed[k:k + 1], state)
        layers = len(extras)
        extra = extras[layer] if extras else {}
        record = {}
        if extra.get("history_weight") is not None:
            record["history_weight"] = float(extra["history_weight"][0, :, 0].float().mean().clamp(0.0, 1.0))
        for name, key in (("region", "region_attention"), ("history", "history_attention")):
            mean = _mean_heads(extra.get(key))
            if mean is not None:
                record[name] = mean[0].cpu().numpy()
        steps.append(record)
    return steps, layers


def word_attention(steps: list[dict], layers: int, layer: int, tokens: list[str]) -> WordAttention:
    """Per-step records of :func:`forced_trace` -> :class:`WordAttention` (a field is None
    unless every step has it)."""
    def every(key):
        return all(key in s for s in steps) and bool(steps)

    inputs = ["<bos>"] + tokens[:-1]
    history = [s["history"] for s in steps] if every("history") else None
    return WordAttention(
        layer=layer % max(layers, 1), num_layers=layers,
        regions=np.stack([s["region"] for s in steps]) if every("region") else None,
        history_weight=np.array([s["history_weight"] for s in steps]) if every("history_weight") else None,
        history=history, history_labels=None if history is None else [inputs[:len(h)] for h in history])


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
        from catcap.models.parts import model_name

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
    def caption(self, image, *, beam: int = 3, max_length: int = 20) -> dict:
        """One RGB PIL image -> {caption, words, tokens, attention (WordAttention), boxes (N, 4)
        pixel x1, y1, x2, y2 of the grid cells in this image, timings_ms}."""
        cap, times = self.captioner, {}
        t0 = time.perf_counter()
        feats = self.features(image)
        t1 = time.perf_counter()
        [text] = cap.generate(features=[feats], num_beams=beam, max_length=max_length)
        t2 = time.perf_counter()
        words = text.split()
        tokens = words + ["<eos>"]
        x = torch.from_numpy(np.asarray(feats, dtype=np.float32))[None].to(cap.device)
        mask = torch.ones(x.shape[:2], dtype=torch.bool, device=cap.device)
        steps, layers = forced_trace(cap.model, x, mask, [cap.vocab.id(w) for w in words] + [cap.vocab.eos_id],
                                     self.layer)
        attention = word_attention(steps, layers, self.layer, tokens)
        t3 = time.perf_counter()
        times.update(features=1000 * (t1 - t0), caption=1000 * (t2 - t1), attention=1000 * (t3 - t2))
        return {"caption": text, "words": words, "tokens": tokens, "attention": attention,
                "boxes": self.encoder.boxes(image.width, image.height), "timings_ms": times}
