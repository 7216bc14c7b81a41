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

config.json, written last, records the sha256 of every other file (``"sha256": {file: hex}``)
and of its own content (``"content"``: the canonical JSON of format, config, features and
workdir); :func:`load_checkpoint` checks each file it reads against them and refuses a damaged
one with a :class:`CheckpointError` naming it. A checkpoint written before the hashes existed
(no ``"sha256"``) loads without the check. Fault points ``checkpoint.*`` (``catcap.faults``) sit
between the writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_tensor_bytes
from safetensors.torch import save_file

from catcap import faults
from catcap.atomic import NEW_FILE_MODE, fsync_file, sha256_file
from catcap.folders import building_folder, restore_aside

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
                    trainer: dict | None = None, features: dict | None = None, workdir: str | None = None) -> Path:
    """Write a checkpoint directory atomically (replacing an existing one). ``features``: the
    training feature store's meta (which image encoder and preprocessing made the features),
    kept in config.json so that the model can later caption raw images the same way;
    ``workdir``: the folder the run's relative data paths are relative to (its working folder)."""
    directory = Path(directory)
    with building_folder(directory) as tmp:
        _save_tensors({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, tmp / "model.safetensors")
        faults.point("checkpoint.after_weights")
        _write_json(tmp / "vocab.json", vocab)
        faults.point("checkpoint.after_vocab")
        if trainer is not None:
            tensors: dict[str, torch.Tensor] = {}
            skeleton = flatten_tensors(trainer, "trainer", tensors)
            _save_tensors(tensors, tmp / "trainer.safetensors")
            _write_json(tmp / "trainer.json", skeleton)
        faults.point("checkpoint.after_trainer")
        meta = json.loads(json.dumps({"format": FORMAT, "config": config, "features": features or {},
                                      "workdir": workdir}))  # as it will read back (tuples -> lists, ...)
        meta["sha256"] = {f.name: sha256_file(f) for f in sorted(tmp.iterdir())}
        meta["sha256"]["content"] = _content_sha256(meta)
        _write_json(tmp / "config.json", meta)
        faults.point("checkpoint.after_config")
        _publish(tmp)
        faults.point("checkpoint.before_rename")
    return directory


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors' save_file, its I/O failures (a full disk, a file size limit) raised as the
    OSError they are: safetensors wraps them in a SafetensorError that no caller would expect."""
    try:
        save_file(tensors, str(path))
    except SafetensorError as err:
        found = re.search(r"\(os error (\d+)\)", str(err))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


HASHED_META = ("format", "config", "features", "workdir")


def _content_sha256(meta: dict) -> str:
    """sha256 of config.json's own content (canonical JSON of :data:`HASHED_META`)."""
    part = {k: meta.get(k) for k in HASHED_META}
    return hashlib.sha256(json.dumps(part, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _publish(tmp: Path) -> None:
    """Flush every file to disk and give it the mode a user's own file would have (safetensors
    writes 0o600 files; :func:`~catcap.folders.building_folder` does the folder's mode)."""
    for f in tmp.iterdir():
        fsync_file(f)
        os.chmod(f, NEW_FILE_MODE)


def _write_json(path: Path, data) -> None:
    """Into the temporary folder (flushed to disk by :func:`_publish`)."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


class CheckpointError(ValueError):
    """A directory that is not a readable catcap checkpoint."""


def _not_a_checkpoint(directory: Path, missing: list[str]) -> str:
    """What is wrong with ``directory``, and the checkpoint the user probably meant."""
    if not directory.exists():
        return f"no checkpoint at {directory}: the folder does not exist"
    inside = [name for name in ("best", "last") if (directory / name / "config.json").is_file()]
    if inside:
        return (f"{directory} is a training run's folder, not a checkpoint; its checkpoints are "
                + " and ".join(str(directory / name) for name in inside))
    return f"{directory} is not a complete catcap checkpoint: missing {', '.join(missing)}"


def load_checkpoint(directory: str | Path, *, with_trainer: bool = False) -> dict:
    """Read a checkpoint: {"weights", "config", "vocab", "features", "workdir"[, "trainer"]} (no
    pickle is loaded); ``features`` is the feature store's meta ({} when not recorded),
    ``workdir`` the training run's working folder (None when not recorded)."""
    directory = Path(directory)
    restore_aside(directory)  # a kill between the two renames of a save
    needed = ["model.safetensors", "config.json", "vocab.json"] + (["trainer.json", "trainer.safetensors"] if with_trainer else [])
    missing = [n for n in needed if not (directory / n).is_file()]
    if missing:
        raise CheckpointError(_not_a_checkpoint(directory, missing))
    meta = _read_json(directory / "config.json")
    found = meta.get("format") if isinstance(meta, dict) else f"a JSON {type(meta).__name__}"
    if found != FORMAT:
        raise CheckpointError(f"{directory}/config.json: expected format {FORMAT}, found {found!r}")
    if not isinstance(meta.get("config"), dict):
        raise CheckpointError(f"{directory}/config.json: expected the experiment config under \"config\", found "
                              f"{type(meta.get('config')).__name__}; the checkpoint is damaged: save it again")
    _check_config(directory / "config.json", meta)
    hashes = _hashes(directory, meta)
    out = {"weights": _read_tensors(directory / "model.safetensors", hashes), "config": meta["config"],
           "vocab": _read_json(directory / "vocab.json", hashes),
           "features": meta.get("features") or {}, "workdir": meta.get("workdir")}
    if with_trainer:
        out["trainer"] = load_trainer_state(directory, hashes)
    return out


def _check_config(path: Path, meta: dict) -> None:
    """Why an edited config.json is refused, said precisely: when its content no longer matches
    its own sha256, the experiment config in it (a VQA checkpoint's: its captioner's) is checked
    against the config schema first, so that a field edited to the wrong type or an impossible
    value is reported as that, naming the key, what was expected and what was found (the hash
    would only say that the file changed). An unedited file is left to its reader: it is what
    some catcap wrote, and an older version's keys are not damage."""
    hashes = meta.get("sha256")
    if not isinstance(hashes, dict) or hashes.get("content") == _content_sha256(meta):
        return
    from catcap.config import ConfigError, from_dict
    from catcap.training.experiment import ExperimentConfig

    config = meta["config"]
    part, where = (config.get("captioner"), "config.captioner") if "vqa" in config else (config, "config")
    try:
        from_dict(ExperimentConfig, part, where)
    except ConfigError as err:
        raise CheckpointError(f"{path}: {err}; the checkpoint's config was edited or damaged: use another checkpoint "
                              "or a good copy") from None


def _hashes(directory: Path, meta: dict) -> dict | None:
    """config.json's recorded sha256 per file (None for a checkpoint written before them),
    after checking config.json's own content against its ``content`` hash."""
    hashes = meta.get("sha256")
    if hashes is None:
        return None
    if not isinstance(hashes, dict) or hashes.get("content") != _content_sha256(meta):
        raise CheckpointError(f"{directory / 'config.json'}: its content does not match the sha256 it records; "
                              "the file is damaged or was edited by hand: use another checkpoint or a good copy")
    return hashes


def load_trainer_state(directory: str | Path, hashes: dict | None = None) -> dict:
    """The trainer part of a checkpoint alone (optimizer, position, RNG, AWC betas), without
    reading the model weights; the files must exist (:func:`load_checkpoint` checks them).
    ``hashes``: config.json's (read from it when not given)."""
    directory = Path(directory)
    if hashes is None and (directory / "config.json").is_file():
        meta = _read_json(directory / "config.json")
        hashes = _hashes(directory, meta) if isinstance(meta, dict) else None
    tensors = _read_tensors(directory / "trainer.safetensors", hashes)
    return unflatten_tensors(_read_json(directory / "trainer.json", hashes), tensors)


def _check_sha256(path: Path, data: bytes, hashes: dict | None) -> None:
    """Refuse a checkpoint file whose bytes do not match its recorded sha256 (when there is one);
    checked after parsing, so a file cut short is still called that."""
    expected = (hashes or {}).get(path.name)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise CheckpointError(f"{path}: its content does not match the sha256 recorded in "
                              f"{path.parent / 'config.json'}; the checkpoint is damaged (a bit flip, a copy cut "
                              "short or an edit): use another checkpoint or a good copy")


def _read_json(path: Path, hashes: dict | None = None):
    """A checkpoint's JSON file; CheckpointError naming the file when it is not readable JSON
    or not the file that was saved."""
    data = path.read_bytes()
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{path}: not readable JSON ({err}); the checkpoint is damaged (a copy cut short?): "
                              "save it again or use another checkpoint") from None
    _check_sha256(path, data, hashes)
    return value


def _read_tensors(path: Path, hashes: dict | None = None) -> dict[str, torch.Tensor]:
    """A checkpoint's safetensors file; CheckpointError naming the file when it is truncated,
    otherwise not a safetensors file (safetensors' own error says neither), or not the file
    that was saved."""
    data = path.read_bytes()
    try:
        tensors = load_tensor_bytes(data)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{path}: not a complete safetensors file ({err}); the checkpoint is damaged "
                              "(a copy cut short?): save it again or use another checkpoint") from None
    _check_sha256(path, data, hashes)
    return tensors
