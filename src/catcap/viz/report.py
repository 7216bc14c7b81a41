"""``catcap analyze history`` in one call: numbers, JSON and pictures for one or more checkpoints.

Writes into ``out``:

    history_weight.png            mean history weight per word position, one line per checkpoint
    history_weight.json           the numbers behind it (per position, per head, counts, captions)
    attention_<image_id>.png      one image, one panel per generated word (one checkpoint), or
    attention_<image_id>_<label>.png  one such file per checkpoint when several are given
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from catcap.atomic import write_json_atomic
from catcap.viz.history import (HistoryCurve, check_history_model, collect_history_weights, default_label, find_record,
                                image_attention, image_file, image_folders, load_captioner, read_awc_beta,
                                resolve_layer, summary_positions)


@dataclass
class HistoryReport:
    curves: list[HistoryCurve]
    history_png: Path
    history_json: Path
    attention_pngs: list[Path]
    image_id: str
    photo: Path | None = None  # the photo the attention was drawn on (None: not found, drawn as bars)
    photo_folders: list[Path] = field(default_factory=list)  # where it was looked for


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "model"


def _labels(captioners, labels: Sequence[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(captioners):
            raise ValueError(f"got {len(labels)} --label for {len(captioners)} --checkpoint; give one label per "
                             "checkpoint, in the same order, or none (labels then come from the configs)")
        return list(labels)
    out = [default_label(c) for c in captioners]
    if len(set(out)) < len(out):  # same config twice: tell them apart by position
        out = [f"{name} ({i + 1})" for i, name in enumerate(out)]
    return out




def analyze_history(checkpoints: Sequence[str | Path], out: str | Path, *, labels: Sequence[str] | None = None,
                    split: str = "val", limit: int | None = 250, layer: int = -1, image_id: str | None = None,
                    max_len: int = 20, batch_size: int = 50, include_eos: bool = True,
                    dataset: str | Path | None = None, features: str | Path | None = None,
                    device: str = "auto", progress: bool = True, images: str | Path | None = None) -> HistoryReport:
    """Collect the history weights of every checkpoint over ``split`` and draw the pictures
    (``images``: the folder of the dataset's photos, for the attention picture)."""
    from catcap.viz.history_plots import plot_history_weight, plot_image_attention

    if not checkpoints:
        raise ValueError("expected at least one checkpoint (--checkpoint DIR), got none")
    caps = [load_captioner(c, device) for c in checkpoints]
    for path, cap in zip(checkpoints, caps):  # fail on any bad input before the long part
        check_history_model(cap, f"checkpoint {path}")
        resolve_layer(cap, layer)
    names = _labels(caps, labels)
    first_dataset = dataset or caps[0].data_file("dataset")
    record = find_record(first_dataset, None if image_id is None else str(image_id), split)
    key, folders = record.key, image_folders(first_dataset, images)
    curves = []
    for path, cap, name in zip(checkpoints, caps, names):
        curve = collect_history_weights(cap, split=split, limit=limit, layer=layer, batch_size=batch_size,
                                        max_len=max_len, include_eos=include_eos, dataset=dataset,
                                        features=features, label=name, progress=progress)
        curve.checkpoint = str(path)
        betas = read_awc_beta(path)
        curve.beta = None if betas is None else [float(b) for b in betas[curve.layer]]
        curves.append(curve)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)  # only now: a run that fails above leaves no empty folder
    history_png = plot_history_weight(curves, out / "history_weight.png")
    attention = []
    for path, cap, name in zip(checkpoints, caps, names):
        att = image_attention(cap, key, split=split, layer=layer, max_len=max_len, dataset=dataset,
                              features=features, label=name, images=images)
        file = f"attention_{_slug(key)}.png" if len(caps) == 1 else f"attention_{_slug(key)}_{_slug(name)}.png"
        attention.append(plot_image_attention(att, out / file))
    history_json = out / "history_weight.json"
    write_json_atomic(history_json, {
        "what": "mean total final-pass attention on history entries (a_t, head average) per generated word "
                "position, over the images still generating at that position",
        "split": split, "image_id": key,
        "checkpoints": [{**c.to_dict(with_captions=True), "summary": summary_positions(c)} for c in curves],
        "files": {"history_weight": history_png.name, "attention": [p.name for p in attention]},
    })
    return HistoryReport(curves, history_png, history_json, attention, key, image_file(record, folders), folders)
