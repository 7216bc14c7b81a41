"""How a CAT / LightCAT model uses its historical context memory (SPEC.md §3, paper Fig. 5).

Two computations, no plotting (see :mod:`catcap.viz.history_plots` for the pictures):

* :func:`collect_history_weights` greedy-decodes a split (or its first ``limit`` images) and
  returns, per generated token position k = 1..T, the history weight ``a_k`` of one decoder
  layer (the total final-pass attention on history entries, averaged over heads), averaged
  over the images that are still generating at position k (finished rows are left out).
* :func:`image_attention` decodes one image and returns its generated tokens and, for each,
  the final-pass attention over the image regions and over the history entries
  (head-averaged, one layer).

Positions: position k is the decoding step that produces the k-th output token. Its input is
the (k-1)-th word (``<bos>`` for k = 1); the step that produces ``<eos>`` is counted (it is a
real step of the model and the AWC loss constrains it too) unless ``include_eos=False``.
History entry j (1-based) is the context stored at step j, so it is labelled with that step's
input token: the entries seen while producing word k are ``<bos>, w_1, .., w_{k-1}`` (CACA /
``chc`` also holds the current step's own entry, ``ihc`` does not).

Decoding is the greedy decoding of :meth:`catcap.Captioner.generate` (``<pad>``, ``<bos>``,
``<unk>`` suppressed, ``<eos>`` forced after ``max_len`` words), so the captions analysed are
the captions ``catcap caption --beam 1`` prints. Legend: B images, H heads, S steps, N regions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from catcap.models.parts import history_heads, history_layers, model_name
from catcap.progress import progress_bar

HISTORY_VARIANTS = ("caca", "light_caca")  # cross attentions with a historical context memory


# -- loading and checks --------------------------------------------------------------------

def load_captioner(checkpoint, device: str = "auto"):
    """A :class:`catcap.Captioner` from a checkpoint directory (a loaded one is returned as is)."""
    from catcap.inference.captioner import Captioner

    if isinstance(checkpoint, Captioner):
        return checkpoint
    return Captioner.from_pretrained(checkpoint, device=device)


def check_history_model(captioner, source: str = "this checkpoint") -> None:
    """ValueError unless the model's cross attention keeps a historical context memory."""
    name = captioner.config.model.cross_attention
    if name not in HISTORY_VARIANTS:
        raise ValueError(
            f"{source} uses model.cross_attention={name!r}, which has no historical context memory, so "
            f"there is no history weight to analyse; expected a model with cross attention "
            f"{' or '.join(HISTORY_VARIANTS)} (CAT / LightCAT). Train one with model.cross_attention=caca "
            f"(optionally train.awc.enabled=true) and pass that checkpoint instead")


def resolve_layer(captioner, layer: int) -> int:
    """Decoder layer index (negative counts from the top, -1 = top) -> 0-based index."""
    n = history_layers(captioner.config.model)
    if not -n <= layer < n:
        raise ValueError(f"layer {layer} does not exist: the model has {n} decoder layers; use a layer "
                         f"between {-n} and {n - 1} (-1 = the top layer, 0 = the bottom one)")
    return layer % n


def _own_entry(captioner) -> bool:
    """Whether a step's history holds its own entry (every strategy but ``ihc``)."""
    return captioner.config.model.history.strategy != "ihc"


def _split_records(dataset: str | Path, split: str):
    from catcap.data.karpathy import load_karpathy

    return load_karpathy(dataset, [split])[split]


def _data_paths(captioner, dataset, features) -> tuple[str, str]:
    dataset = str(dataset or (captioner.data_file("dataset") if captioner.config.data.dataset else ""))
    features = str(features or (captioner.data_file("features") if captioner.config.data.features else ""))
    if not dataset or not features:
        raise ValueError("the checkpoint's config names no data.dataset / data.features; pass the Karpathy "
                         "file and the feature store explicitly (--dataset, --features)")
    return dataset, features


# -- the traced decoding -----------------------------------------------------------------------

@dataclass
class _Trace:
    """Greedy decoding of B images with one layer's attention recorded at every step.

    tokens (B, S) output tokens; active (B, S) True where the row was still generating;
    history_weight (B, H, S); region (B, S, N) or None; history (B, S, S) with column j =
    entry of step j (zero where absent); entries[s] = history entries visible at step s.
    """

    tokens: torch.Tensor
    active: torch.Tensor
    history_weight: torch.Tensor
    region: torch.Tensor | None
    history: torch.Tensor | None
    entries: list[int]


@torch.no_grad()
def trace_greedy(model, features: torch.Tensor, feature_mask: torch.Tensor, layer: int, max_len: int,
                 vocab=None, keep_maps: bool = False, own_entry: bool = True) -> _Trace:
    """Greedy decoding (:func:`catcap.decoding.generate`, the caption rules of ``vocab``) with
    the history weights of decoder layer ``layer`` read from its output
    (``output_history_weights``); ``keep_maps`` also keeps the attention maps
    (``output_attentions``). ``own_entry``: the layer's history holds the current step's own
    entry (chc, ohc; not ihc), so step s sees s + 1 entries."""
    from catcap.decoding import GenerationConfig, generate

    model.eval()
    config = GenerationConfig(num_beams=1, max_length=max_len, output_history_weights=True, output_attentions=keep_maps)
    out = generate(model, features, feature_mask, config, vocab=vocab)
    if out.history_weights is None:
        raise ValueError(f"decoder layer {layer} reports no history weight; expected a caca / light_caca cross "
                         "attention")
    steps = out.tokens.shape[1]
    region = history = None
    if keep_maps:
        if out.region_attentions is not None:
            region = out.region_attentions[:, :, layer].mean(2)  # (B, S, N), head-averaged
        maps = out.history_attentions[:, :, layer].mean(2)  # (B, S, M)
        history = torch.nn.functional.pad(maps, (0, steps - maps.shape[-1]))[:, :, :steps]
    entries = [s + 1 if own_entry else s for s in range(steps)]
    return _Trace(out.tokens, out.mask, out.history_weights[:, :, layer].permute(0, 2, 1), region, history, entries)


def _batch_features(store, records) -> tuple[torch.Tensor, torch.Tensor]:
    from catcap.data.collate import pad_regions

    regions = [torch.from_numpy(store.get(r.key).regions) for r in records]
    feats, mask, _ = pad_regions(regions, [None] * len(regions), [r.key for r in records])
    return feats, mask


# -- per-position history weight -------------------------------------------------------------

@dataclass
class HistoryCurve:
    """Mean history weight per generated token position of one checkpoint (see module doc).

    mean[k-1] = mean over images still generating at position k of the head-averaged a_k;
    per_head[h][k-1] the same per head; counts[k-1] the number of those images; beta: the
    checkpoint's AWC targets of this layer per head (None without AWC or trainer state).
    """

    label: str
    checkpoint: str
    cross_attention: str
    strategy: str
    awc: bool
    layer: int
    num_layers: int
    split: str
    images: int
    include_eos: bool
    mean: list[float]
    per_head: list[list[float]]
    counts: list[int]
    beta: list[float] | None = None
    captions: dict[str, str] = field(default_factory=dict)

    @property
    def positions(self) -> list[int]:
        return list(range(1, len(self.mean) + 1))

    @property
    def overall(self) -> float:
        """Mean history weight over every generated position of every image."""
        total = sum(m * c for m, c in zip(self.mean, self.counts))
        return total / max(sum(self.counts), 1)

    def at(self, position: int) -> float:
        """Mean history weight at 1-based ``position`` (negative: from the end)."""
        return self.mean[position - 1 if position > 0 else position]

    def to_dict(self, with_captions: bool = False) -> dict:
        out = asdict(self)
        out.pop("captions")
        out.update(positions=self.positions, overall=self.overall, layer_from_top=self.layer - self.num_layers)
        if with_captions:
            out["captions"] = self.captions
        return out


def read_awc_beta(checkpoint) -> list[list[float]] | None:
    """The AWC betas (L, H) saved with a checkpoint's trainer state, or None."""
    if not isinstance(checkpoint, (str, Path)):
        return None
    path = Path(checkpoint) / "trainer.safetensors"
    if not path.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        key = "trainer.awc.beta"
        return f.get_tensor(key).tolist() if key in f.keys() else None


def collect_history_weights(checkpoint, *, split: str = "val", limit: int | None = 250, layer: int = -1,
                            batch_size: int = 50, max_len: int = 20, include_eos: bool = True,
                            dataset: str | Path | None = None, features: str | Path | None = None,
                            label: str | None = None, device: str = "auto", progress: bool = True) -> HistoryCurve:
    """Greedy-decode ``split`` (its first ``limit`` images; None = all) with a checkpoint (a
    directory or a loaded :class:`catcap.Captioner`) and average the history weight of decoder
    layer ``layer`` per generated position. ``dataset`` / ``features`` default to the
    checkpoint's ``data.dataset`` / ``data.features``."""
    from catcap.data.features import check_features, open_feature_store

    cap = load_captioner(checkpoint, device)
    source = f"checkpoint {checkpoint}" if isinstance(checkpoint, (str, Path)) else "this model"
    check_history_model(cap, source)
    index = resolve_layer(cap, layer)
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of images (or None for the whole split), got {limit}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    dataset, features = _data_paths(cap, dataset, features)
    records = _split_records(dataset, split)[:limit]
    store = cap.reading(open_feature_store(features))
    check_features(store, [r.key for r in records], cap.config.model.input_dim)
    heads = history_heads(cap.config.model)  # level-heads in a meshed (M2) decoder
    sums = np.zeros((heads, max_len + 1))
    counts = np.zeros(max_len + 1, dtype=np.int64)
    captions = {}
    bar = progress_bar(total=len(records), desc=f"history weights ({label or split})", unit="img", enabled=progress)
    for i in range(0, len(records), batch_size):
        chunk = records[i:i + batch_size]
        feats, mask = _batch_features(store, chunk)
        trace = trace_greedy(cap.model, feats.to(cap.device), mask.to(cap.device), index, max_len, cap.vocab,
                             own_entry=_own_entry(cap))
        active = trace.active.clone()
        if not include_eos:
            active &= trace.tokens != cap.model.eos_id
        # a sum of float32 softmax weights can exceed 1 by rounding (1e-7): clip to the true range
        a = trace.history_weight.double().clamp(0.0, 1.0).cpu().numpy()  # (B, H, S)
        m = active.cpu().numpy()
        s = a.shape[2]
        sums[:, :s] += (a * m[:, None, :]).sum(0)
        counts[:s] += m.sum(0)
        for rec, row in zip(chunk, trace.tokens.cpu().tolist()):
            captions[rec.key] = " ".join(cap.vocab.decode(row))
        bar.update(len(chunk))
    bar.close()
    store.close()
    used = int(np.nonzero(counts)[0].max()) + 1 if counts.any() else 0
    per_head = sums[:, :used] / np.maximum(counts[:used], 1)
    betas = read_awc_beta(checkpoint)
    cfg = cap.config
    return HistoryCurve(
        label=label or default_label(cap), checkpoint=str(checkpoint) if isinstance(checkpoint, (str, Path)) else "",
        cross_attention=cfg.model.cross_attention, strategy=cfg.model.history.strategy, awc=cfg.train.awc.enabled,
        layer=index, num_layers=history_layers(cfg.model), split=split, images=len(records), include_eos=include_eos,
        mean=[float(x) for x in per_head.mean(0)], per_head=per_head.tolist(), counts=counts[:used].tolist(),
        beta=None if betas is None else [float(b) for b in betas[index]], captions=captions)


def default_label(captioner) -> str:
    """``CAT`` / ``LightCAT`` / ``M2 + CACA`` / ``M2 + LightCACA`` plus ``+ AWC`` or ``no AWC``
    (from the experiment config)."""
    cfg = captioner.config
    name = model_name(cfg.model)
    return f"{name} + AWC" if cfg.train.awc.enabled else f"{name}, no AWC"


# -- one image ---------------------------------------------------------------------------------

@dataclass
class ImageAttention:
    """One image's greedy caption with the final-pass attention of one decoder layer.

    tokens: the output tokens (words, then ``<eos>`` if produced); history_weight[k] = a_{k+1}
    (head-averaged); region_attention (T, N) head-averaged weights on the regions (None for
    ``ohc``, whose final pass sees no regions); history_attention[k] the weights on the
    history entries visible at step k+1, labelled history_labels[k] (their steps' input
    tokens); boxes (N, 4) normalised x1, y1, x2, y2 or None; image_path the image file if it
    exists. Region weights plus history weights of a step sum to 1.
    """

    key: str
    label: str
    layer: int
    num_layers: int
    strategy: str
    tokens: list[str]
    history_weight: np.ndarray
    region_attention: np.ndarray | None
    history_attention: list[np.ndarray]
    history_labels: list[list[str]]
    boxes: np.ndarray | None
    image_path: Path | None
    references: list[str] = field(default_factory=list)

    @property
    def caption(self) -> str:
        return " ".join(t for t in self.tokens if t != "<eos>")


def find_record(dataset: str | Path, key: str | None, split: str):
    """The record of image ``key`` (any split), or the first image of ``split`` when key is None."""
    from catcap.data.karpathy import load_karpathy

    if key is None:
        return _split_records(dataset, split)[0]
    every = load_karpathy(dataset)
    for records in every.values():
        for rec in records:
            if rec.key == str(key):
                return rec
    some = [r.key for r in every.get(split, [])[:5]]
    raise ValueError(f"image {key!r} is not in {dataset}; expected an image id of the file (e.g. of split "
                     f"{split!r}: {', '.join(some)}); pass --image-id with one of its ids")


def image_folders(dataset: str | Path, images: str | Path | None = None) -> list[Path]:
    """Where a dataset's photos may be, in order: ``images`` (``--images``), the dataset file's
    folder, and the images folder ``catcap import`` recorded in the file (as given, then taken
    from the dataset file's folder)."""
    import json

    dataset = Path(dataset)
    folders = ([Path(images)] if images else []) + [dataset.parent]
    try:
        recorded = json.loads(dataset.read_text(encoding="utf-8")).get("catcap_import", {}).get("source", {}).get("images_dir")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded:
        folders += [Path(recorded), dataset.parent / recorded]
    return folders


def image_file(record, folders: Sequence[Path]) -> Path | None:
    """The record's photo: ``<folder>/<filepath>/<filename>`` or ``<folder>/<filename>`` in the
    first folder that has it; None when none has."""
    for folder in folders:
        for path in (folder / str(record.extra.get("filepath", "")) / record.filename, folder / record.filename):
            if record.filename and path.is_file():
                return path
    return None


@torch.no_grad()
def image_attention(checkpoint, image_id: str | int | None = None, *, split: str = "val", layer: int = -1,
                    max_len: int = 20, dataset: str | Path | None = None, features: str | Path | None = None,
                    label: str | None = None, device: str = "auto", images: str | Path | None = None) -> ImageAttention:
    """Greedy caption of one image (default: the first of ``split``) with, per output token,
    the head-averaged final-pass attention of decoder layer ``layer`` over regions and history.
    ``images``: a folder holding the photo (default: see :func:`image_folders`); without the
    photo, ``image_path`` is None and the picture shows the regions as bars."""
    from catcap.data.features import check_features, open_feature_store

    cap = load_captioner(checkpoint, device)
    check_history_model(cap, f"checkpoint {checkpoint}" if isinstance(checkpoint, (str, Path)) else "this model")
    index = resolve_layer(cap, layer)
    dataset, features = _data_paths(cap, dataset, features)
    rec = find_record(dataset, None if image_id is None else str(image_id), split)
    with cap.reading(open_feature_store(features)) as store:
        check_features(store, [rec.key], cap.config.model.input_dim)
        item = store.get(rec.key)
    feats = torch.from_numpy(item.regions)[None].to(cap.device)
    mask = torch.ones(feats.shape[:2], dtype=torch.bool, device=cap.device)
    trace = trace_greedy(cap.model, feats, mask, index, max_len, cap.vocab, keep_maps=True, own_entry=_own_entry(cap))
    steps = int(trace.active[0].sum())
    ids = trace.tokens[0, :steps].tolist()
    tokens = [cap.vocab.word(i) for i in ids]
    inputs = ["<bos>"] + tokens[:-1]
    hist = trace.history[0].cpu().numpy()
    return ImageAttention(
        key=rec.key, label=label or default_label(cap), layer=index, num_layers=history_layers(cap.config.model),
        strategy=cap.config.model.history.strategy, tokens=tokens,
        history_weight=trace.history_weight[0, :, :steps].mean(0).clamp(0.0, 1.0).cpu().numpy(),
        region_attention=None if trace.region is None else trace.region[0, :steps].cpu().numpy(),
        history_attention=[hist[s, : trace.entries[s]] for s in range(steps)],
        history_labels=[inputs[: trace.entries[s]] for s in range(steps)],
        boxes=item.boxes, image_path=image_file(rec, image_folders(dataset, images)), references=list(rec.raw))


def summary_positions(curve: HistoryCurve, positions: Sequence[int] = (1, 2, 5)) -> dict[str, float]:
    """``{"1": a_1, "2": a_2, "5": a_5, "last": a_T}`` (positions that exist)."""
    out = {str(p): curve.at(p) for p in positions if p <= len(curve.mean)}
    if curve.mean:
        out["last"] = curve.mean[-1]
    return out
