"""Checkpoints without pickle: safetensors for every tensor, JSON for everything else.

A checkpoint is a directory:

    model.safetensors      model weights
    config.json            the experiment config (plain JSON)
    vocab.json             the vocabulary
    trainer.safetensors    tensors of the training state (optimizer moments, RNG states)
    trainer.json           the rest of the training state (step, epoch, scheduler, best score,
                           numpy/python RNG states), tensors referenced by key

It is written into a temporary sibling directory and renamed into place, so a run killed
at any moment leaves either the previous checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from catcap.atomic import NEW_DIR_MODE, NEW_FILE_MODE, fsync_file

TENSOR = "__tensor__"
FORMAT = "catcap-checkpoint-v1"


def flatten_tensors(tree: Any, prefix: str, out: dict[str, torch.Tensor]) -> Any:
    """Replace every tensor of a nested structure by ``{"__tensor__": key}``, collecting them."""
    if isinstance(tree, torch.Tensor):
        key = prefix or "root"
        out[key] = tree.detach().cpu().contiguous()
        return {TENSOR: key}
    if isinstance(tree, dict):
        if not all(isinstance(k, (str, int)) for k in tree):
            raise TypeError(f"{prefix}: only str/int dict keys can be saved, found {list(tree)[:3]}")
        return {"__dict__": [[k, flatten_tensors(v, f"{prefix}.{k}", out)] for k, v in tree.items()]}
    if isinstance(tree, (list, tuple)):
        items = [flatten_tensors(v, f"{prefix}.{i}", out) for i, v in enumerate(tree)]
        return {"__tuple__": items} if isinstance(tree, tuple) else items
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    raise TypeError(f"{prefix}: cannot save a {type(tree).__name__} in a checkpoint")


def unflatten_tensors(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten_tensors`."""
    if isinstance(tree, dict):
        if TENSOR in tree:
            return tensors[tree[TENSOR]]
        if "__dict__" in tree:
            return {k: unflatten_tensors(v, tensors) for k, v in tree["__dict__"]}
        if "__tuple__" in tree:
            return tuple(unflatten_tensors(v, tensors) for v in tree["__tuple__"])
    if isinstance(tree, list):
        return [unflatten_tensors(v, tensors) for v in tree]
    return tree


def save_checkpoint(directory: str | Path, *, model: torch.nn.Module, config: dict, vocab: dict,
                    trainer: dict | None = None, features: dict | None = None) -> Path:
    """Write a checkpoint directory atomically (replacing an existing one). ``features``: the
    training feature store's meta (which image encoder and preprocessing made the features),
    kept in config.json so that the model can later caption raw images the same way."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(tmp / "model.safetensors"))
        _write_json(tmp / "config.json", {"format": FORMAT, "config": config, "features": features or {}})
        _write_json(tmp / "vocab.json", vocab)
        if trainer is not None:
            tensors: dict[str, torch.Tensor] = {}
            skeleton = flatten_tensors(trainer, "trainer", tensors)
            save_file(tensors, str(tmp / "trainer.safetensors"))
            _write_json(tmp / "trainer.json", skeleton)
        _publish(tmp)
        _swap_in(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _publish(tmp: Path) -> None:
    """Flush every file to disk and give the folder and its files the modes a user's own would
    have (``mkdtemp`` makes the folder 0o700 and safetensors writes 0o600 files)."""
    for f in tmp.iterdir():
        fsync_file(f)
        os.chmod(f, NEW_FILE_MODE)
    os.chmod(tmp, NEW_DIR_MODE)


def _write_json(path: Path, data) -> None:
    """Into the temporary folder (flushed to disk by :func:`_publish`)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


def _swap_in(tmp: Path, directory: Path) -> None:
    """Rename ``tmp`` to ``directory``; an existing checkpoint is moved aside first, then removed."""
    old = None
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(tmp, directory)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class CheckpointError(ValueError):
    """A directory that is not a readable catcap checkpoint."""


def load_checkpoint(directory: str | Path, *, with_trainer: bool = False) -> dict:
    """Read a checkpoint: {"weights", "config", "vocab", "features"[, "trainer"]} (no pickle is
    loaded); ``features`` is the feature store's meta ({} when not recorded)."""
    directory = Path(directory)
    _recover(directory)
    needed = ["model.safetensors", "config.json", "vocab.json"] + (["trainer.json", "trainer.safetensors"] if with_trainer else [])
    missing = [n for n in needed if not (directory / n).is_file()]
    if missing:
        raise CheckpointError(f"{directory} is not a complete catcap checkpoint: missing {', '.join(missing)}")
    meta = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{directory}/config.json: expected format {FORMAT}, found {meta.get('format')!r}")
    out = {"weights": load_file(str(directory / "model.safetensors")), "config": meta["config"],
           "vocab": json.loads((directory / "vocab.json").read_text(encoding="utf-8")),
           "features": meta.get("features") or {}}
    if with_trainer:
        tensors = load_file(str(directory / "trainer.safetensors"))
        out["trainer"] = unflatten_tensors(json.loads((directory / "trainer.json").read_text(encoding="utf-8")), tensors)
    return out


def _recover(directory: Path) -> None:
    """If a crash happened between moving the old checkpoint aside and renaming the new one
    in, the old one is still complete: put it back."""
    old = directory.with_name(f".{directory.name}.old")
    if not directory.exists() and old.exists():
        os.replace(old, directory)
