"""The model zoo: trained captioners bundled with the repository, ready to caption photos.

A zoo model is a folder ``zoo/<name>/`` (``docs/zoo.md``):

    model.safetensors   the weights in fp16 (floating tensors; others keep their dtype)
    config.json         {"format": "catcap-zoo-v1", "name", "config": experiment config,
                         "features": the training feature store's meta (image encoder, preprocessing)}
    vocab.json          the vocabulary
    README.md           the model card: YAML front matter (machine-readable: sha256 of the three
                        files above, recipe, evaluation command, scores) + the card for people

It is made from a checkpoint by :func:`build` (``catcap zoo build``), deterministically: the same
checkpoint gives byte-identical files. :func:`load_zoo_folder` refuses a folder whose files do not
match the hashes in its card. :func:`locate` turns what ``Captioner.from_pretrained`` is given (a
folder, a zoo name, a Hugging Face Hub id) into a folder. This module imports no captioner (the
captioner imports it); captioning with a zoo model lives in ``catcap.api``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from catcap.atomic import NEW_FILE_MODE, fsync_file, sha256_file
from catcap.folders import building_folder
from catcap.training.checkpoint import load_checkpoint
from catcap.zoo_card import model_card

FORMAT = "catcap-zoo-v1"
ZOO_ENV = "CATCAP_ZOO"  # another zoo folder than the repository's zoo/ (tests, private zoos)
DEFAULT_MODEL = "flickr8k-m2"  # what `catcap caption` uses without --checkpoint (the best on Flickr8k val)
MAX_MB = 25.0  # the largest model.safetensors a zoo entry may have (it lives in the git repository)
HASHED = ("model.safetensors", "config.json", "vocab.json")
REPO = Path(__file__).resolve().parents[2]  # src/catcap/zoo.py -> the repository (an editable install)
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(@[A-Za-z0-9._/-]+)?$")
HUB_FILES = ["model.safetensors", "config.json", "vocab.json", "README.md"]


class ZooError(ValueError):
    """A zoo model that is missing, damaged or cannot be built."""


def zoo_root(root: str | Path | None = None) -> Path:
    """The zoo folder: ``root`` when given, else ``$CATCAP_ZOO``, else the repository's ``zoo/``."""
    if root is not None:
        return Path(root)
    return Path(os.environ[ZOO_ENV]) if os.environ.get(ZOO_ENV) else REPO / "zoo"


def is_zoo_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds a zoo model (its config.json says ``catcap-zoo-v1``)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == FORMAT
    except (ValueError, AttributeError):
        return False


# ---------------------------------------------------------------- the card


def read_card(folder: str | Path) -> dict:
    """The ``catcap`` block of a zoo folder's README.md front matter (ZooError when missing)."""
    path = Path(folder) / "README.md"
    if not path.is_file():
        raise ZooError(f"{path}: the model card is missing; rebuild the zoo folder with `catcap zoo build`")
    text = path.read_text(encoding="utf-8")
    head, sep, _ = text[4:].partition("\n---\n") if text.startswith("---\n") else ("", "", "")
    try:
        meta = yaml.safe_load(head) if sep else None
    except yaml.YAMLError as err:
        raise ZooError(f"{path}: the card's front matter is not readable YAML ({err})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("catcap"), dict):
        raise ZooError(f"{path}: the card has no `catcap:` block in its front matter (the sha256 of the weights "
                       "lives there); rebuild the zoo folder with `catcap zoo build`")
    return meta["catcap"]


def verify(folder: str | Path) -> dict:
    """Check the files of a zoo folder against the sha256 in its card; returns the card's block."""
    folder = Path(folder)
    card = read_card(folder)
    hashes = card.get("sha256") or {}
    for name in HASHED:
        path = folder / name
        if not path.is_file():
            raise ZooError(f"{path}: missing from the zoo folder")
        if name not in hashes:
            raise ZooError(f"{folder / 'README.md'}: the card records no sha256 for {name}")
        found = sha256_file(path)
        if found != hashes[name]:
            raise ZooError(f"{path} does not match its model card: sha256 {found}, the card ({folder / 'README.md'}) "
                           f"records {hashes[name]}; the file was changed or damaged (a git LFS pointer, a copy cut "
                           "short?): restore it, or rebuild the folder with `catcap zoo build`/`catcap zoo rebuild`")
    return card


def load_zoo_folder(folder: str | Path) -> dict:
    """A zoo folder read like :func:`~catcap.training.checkpoint.load_checkpoint`: {"weights" (as
    stored: fp16), "config", "vocab", "features", "workdir": None, "card"}, after :func:`verify`."""
    folder = Path(folder)
    card = verify(folder)
    try:
        meta = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        weights = load_file(str(folder / "model.safetensors"))
    except (ValueError, SafetensorError) as err:
        raise ZooError(f"{folder}: not a readable zoo folder ({err})") from None
    return {"weights": weights, "config": meta["config"], "vocab": vocab, "features": meta.get("features") or {},
            "workdir": None, "card": card}


# ---------------------------------------------------------------- finding a model


@dataclass
class ZooEntry:
    name: str
    path: Path
    size: int  # bytes of model.safetensors
    scores: dict = field(default_factory=dict)
    card: dict = field(default_factory=dict)


def list_models(root: str | Path | None = None) -> list[ZooEntry]:
    """The zoo's models, sorted by name (the default model first)."""
    folder = zoo_root(root)
    out = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name.startswith(".") or not is_zoo_folder(path):
            continue
        try:
            card = read_card(path)
        except ZooError:
            card = {}
        weights = path / "model.safetensors"
        out.append(ZooEntry(path.name, path, weights.stat().st_size if weights.is_file() else 0,
                            dict(card.get("scores") or {}), card))
    return sorted(out, key=lambda e: (e.name != DEFAULT_MODEL, e.name))


def how_to_get(name: str = DEFAULT_MODEL) -> str:
    return (f"bundle {name!r} from a trained checkpoint with `catcap zoo build {name} --from runs/flickr8k/<run>/best "
            "--scores SCORES.json` (docs/zoo.md gives the recipe that trains it), or caption with your own model: "
            "`catcap caption --checkpoint RUN/best photo.jpg`")


def default_model(root: str | Path | None = None) -> ZooEntry:
    """The model ``catcap caption`` uses without ``--checkpoint``: flickr8k-m2, or the zoo's first."""
    models = list_models(root)
    if not models:
        raise ZooError(f"no model is bundled in the zoo ({zoo_root(root)} holds none); " + how_to_get())
    return models[0]


def local_folder(source: str | Path, root: str | Path | None = None) -> Path | None:
    """The folder on this machine that ``source`` names without a download: an existing folder as
    it is, a zoo name (``flickr8k-cat``) as its folder in the zoo; None for anything else (a Hub
    id, a missing path). :func:`locate` and the CLI's path check (catcap/cli/paths.py) both use it."""
    text, path = str(source), Path(source)
    if path.is_dir():
        return path
    if NAME.match(text) and (zoo_root(root) / text).is_dir():
        return zoo_root(root) / text
    return None


def locate(source: str | Path, root: str | Path | None = None) -> Path:
    """What ``Captioner.from_pretrained`` was given -> a folder: an existing folder (a checkpoint or a
    zoo folder) as it is; a zoo name (``flickr8k-cat``) in the zoo; ``owner/name`` (or
    ``hf://owner/name[@revision]``) that is no folder here from the Hugging Face Hub. Anything else
    comes back as given (the checkpoint loader then says what is missing)."""
    text = str(source)
    path = Path(source)
    if text.startswith("hf://"):
        return hub_download(text[len("hf://"):])
    folder = local_folder(text, root)
    if folder is not None:
        return folder
    if NAME.match(text):
        names = [e.name for e in list_models(root)]
        raise ZooError(f"no folder {text!r} here and no zoo model named {text!r} (the zoo at {zoo_root(root)} holds "
                       f"{', '.join(names) or 'none'})"
                       + ("" if names or text != DEFAULT_MODEL else "; " + how_to_get()))
    if HUB_ID.match(text) and not path.exists():
        return hub_download(text, note=f"there is no folder {text} here")
    return path


def hub_download(repo_id: str, note: str = "") -> Path:
    """A Hugging Face Hub model (``owner/name[@revision]``) downloaded (or found in the local cache
    with ``HF_HUB_OFFLINE=1``) through ``huggingface_hub``, an optional dependency."""
    because = f" ({note})" if note else ""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ZooError(f"{repo_id!r} reads as a Hugging Face Hub id{because}, and loading from the Hub needs the "
                       "optional package huggingface_hub: pip install huggingface_hub (or pip install "
                       "\"catcap[hub]\")") from None
    name, _, revision = repo_id.partition("@")
    try:
        folder = snapshot_download(repo_id=name, revision=revision or None, allow_patterns=HUB_FILES)
    except Exception as err:  # network, unknown repository, offline without a cached copy: one message
        raise ZooError(f"could not get {name!r} from the Hugging Face Hub{because}: {type(err).__name__}: {err}; "
                       "check the id and the network (with HF_HUB_OFFLINE=1 only the local cache is read)") from None
    return Path(folder)


# ---------------------------------------------------------------- building


def fp16_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Floating tensors to fp16 (round to nearest even: deterministic), others as they are; a
    weight outside fp16's range is refused by name."""
    out = {}
    for key, value in weights.items():
        value = value.detach().cpu().contiguous()
        if value.is_floating_point():
            half = value.to(torch.float16)
            if not torch.isfinite(half).all() and torch.isfinite(value).all():
                raise ZooError(f"weight {key} has values beyond fp16's range (max |w| = {value.abs().max():.3g} > "
                               "65504); a zoo model is stored in fp16")
            value = half
        out[key] = value.contiguous()
    return out


def _dump_json(data) -> bytes:
    return (json.dumps(data, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _git_commit() -> str:
    """The repository's commit (short), with ``+changes`` when the checkout has uncommitted ones."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("+changes" if dirty else "")) if head else "unknown"


def training_minutes(checkpoint: Path) -> float | None:
    """Minutes of training steps of the run that made ``checkpoint`` (and of the runs it started
    from, ``train.init_from``), from their log.jsonl batch rates; None without logs."""
    total, seen, ckpt = 0.0, False, checkpoint
    for _ in range(8):  # a chain XE -> SCST -> ... is short
        log = ckpt.parent / "log.jsonl"
        if log.is_file():
            last: dict[tuple, dict] = {}
            for line in log.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("kind") == "train" and rec.get("batches_per_s"):
                    last[(rec.get("phase"), rec.get("epoch"))] = rec
            done = 0
            for rec in sorted(last.values(), key=lambda r: r["step"]):
                total += (rec["step"] - done) / rec["batches_per_s"]
                done, seen = rec["step"], True
        try:
            meta = json.loads((ckpt / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            break
        start = ((meta.get("config") or {}).get("train") or {}).get("init_from")
        if not start:
            break
        start = Path(start)
        if not start.is_absolute() and meta.get("workdir"):
            start = Path(meta["workdir"]) / start
        ckpt = start
    return total / 60 if seen else None


def default_recipe(checkpoint: Path, config: dict, workdir: str | None) -> list[str]:
    """``catcap train --config configs/experiments/<name>.yaml`` for the run and the runs it
    started from, when those config files exist in the repository; else []."""
    commands = []
    for _ in range(8):
        name = str(config.get("name") or "")
        path = REPO / "configs" / "experiments" / f"{name}.yaml"
        if not name or not path.is_file():
            return []
        commands.insert(0, f"OMP_NUM_THREADS=2 catcap train --config configs/experiments/{name}.yaml")
        start = (config.get("train") or {}).get("init_from")
        if not start:
            return commands
        start = Path(start) if Path(start).is_absolute() or not workdir else Path(workdir) / start
        try:
            meta = json.loads((start / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        config, workdir = meta.get("config") or {}, meta.get("workdir")
    return commands


def build(name: str, checkpoint: str | Path, *, scores: str | Path | None = None, recipe: list[str] | None = None,
          eval_command: str | None = None, commit: str | None = None, training_time: str | None = None,
          limits: list[str] | None = None, root: str | Path | None = None, max_mb: float = MAX_MB) -> Path:
    """Write ``<zoo>/<name>`` from a trained checkpoint, atomically (the folder is built aside and
    renamed in; an existing one is replaced): fp16 weights, config, vocabulary and the model card
    filled from the checkpoint, its run's log and ``scores`` (a ``catcap evaluate --output`` file).
    Same inputs, byte-identical files. Returns the folder."""
    if not NAME.match(name):
        raise ZooError(f"zoo name {name!r}: use lower-case letters, digits, '.', '_' and '-' (e.g. flickr8k-cat)")
    checkpoint = Path(checkpoint)
    ckpt = load_checkpoint(checkpoint)
    features = ckpt["features"]
    from catcap.features.efficientnet import ENCODERS

    if features.get("encoder") not in ENCODERS:
        raise ZooError(f"{checkpoint} was trained on features not made by a catcap image encoder (feature meta: "
                       f"{features or 'none'}), so it cannot caption photos; a zoo model is trained on `catcap "
                       f"extract` features (efficientnet-lite0/1/2)")
    weights = fp16_weights(ckpt["weights"])
    evaluation = None
    if scores is not None:
        try:
            evaluation = json.loads(Path(scores).read_text(encoding="utf-8"))
        except ValueError as err:
            raise ZooError(f"{scores}: not readable JSON ({err}); expected a `catcap evaluate --output` file") from None
        if not isinstance(evaluation, dict) or not isinstance(evaluation.get("corpus"), dict):
            raise ZooError(f"{scores}: expected a `catcap evaluate --output` file ({{\"corpus\": {{...}}, ...}})")
    recipe = list(recipe) if recipe else default_recipe(checkpoint, ckpt["config"], ckpt["workdir"])
    if evaluation is not None and not eval_command:
        eval_command = (f"catcap evaluate --checkpoint {shlex.quote(str(checkpoint))} --split val --beam 3 "
                        f"--output {shlex.quote(str(scores))}")
    build_cmd = ["catcap", "zoo", "build", name, "--from", str(checkpoint)]
    if scores is not None:
        build_cmd += ["--scores", str(scores)]
    for command in recipe:
        build_cmd += ["--recipe", command]
    if eval_command:
        build_cmd += ["--eval-command", eval_command]
    if training_time:
        build_cmd += ["--training-time", training_time]
    for line in limits or []:
        build_cmd += ["--limit", line]
    minutes = training_minutes(checkpoint)
    time_text = training_time or (f"about {minutes:.0f} min of training steps (from the runs' log.jsonl batch "
                                  "rates; validation not counted)" if minutes is not None else "not recorded")
    card = {"checkpoint": str(checkpoint), "commit": commit or _git_commit(), "training_time": time_text,
            "recipe": recipe, "evaluate": eval_command or "", "build": shlex.join(build_cmd)}
    return write_model_folder(zoo_root(root) / name, dict(ckpt, weights=weights), card, name=name,
                              evaluation=evaluation, limits=limits, max_mb=max_mb)


def write_model_folder(folder: Path, ckpt: dict, card: dict, *, name: str | None = None,
                       evaluation: dict | None = None, limits: list[str] | None = None,
                       max_mb: float | None = None) -> Path:
    """Write a zoo folder (module doc) from ``ckpt`` (a loaded checkpoint: weights as they are to
    be stored, config, vocab, features), atomically (built aside, renamed in, an existing folder
    replaced): ``catcap zoo build`` (fp16 weights, within ``max_mb``) and
    ``Captioner.save_pretrained`` (the weights as in memory) both write through here. ``card``:
    the card's checkpoint, commit, training_time, recipe, evaluate and build entries. The same
    inputs give byte-identical files. Returns ``folder``."""
    name = name or folder.name
    config = {"format": FORMAT, "name": name, "config": ckpt["config"], "features": ckpt["features"]}
    weights = {k: v.detach().cpu().contiguous() for k, v in ckpt["weights"].items()}
    with building_folder(folder) as tmp:
        # one metadata key: safetensors writes a metadata map in hash order, which varies between runs
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        size = (tmp / "model.safetensors").stat().st_size
        if max_mb is not None and size > max_mb * 1e6:
            raise ZooError(f"{name}: model.safetensors would be {size / 1e6:.1f} MB in fp16, more than the zoo's "
                           f"{max_mb:g} MB; bundle a smaller model")
        (tmp / "config.json").write_bytes(_dump_json(config))
        (tmp / "vocab.json").write_bytes(_dump_json(ckpt["vocab"]))
        meta = {"format": FORMAT, "name": name, "sha256": {f: sha256_file(tmp / f) for f in HASHED},
                "encoder": ckpt["features"].get("encoder"), **card,
                "scores": {k: round(float(v), 6) for k, v in (evaluation or {}).get("corpus", {}).items()},
                "scored_images": len((evaluation or {}).get("per_image") or []) or None}
        (tmp / "README.md").write_text(model_card(meta, ckpt, weights, size, evaluation, limits or []), encoding="utf-8")
        for f in tmp.iterdir():  # safetensors makes private files; flushed before the folder is renamed in
            fsync_file(f)
            os.chmod(f, NEW_FILE_MODE)
    return folder


def saved_card(source: str) -> dict:
    """The card entries of a model saved from Python (no recipe, evaluation or build recorded)."""
    return {"checkpoint": source, "commit": _git_commit(), "training_time": "not recorded", "recipe": [],
            "evaluate": "", "build": ""}


def rebuild_commands(name: str, root: str | Path | None = None) -> list[str]:
    """The commands of the recipe recorded in ``name``'s card: train command(s), evaluate, build."""
    folder = zoo_root(root) / name
    if not folder.is_dir():
        raise ZooError(f"no zoo model named {name!r} in {zoo_root(root)}")
    card = read_card(folder)
    if not card.get("recipe"):
        raise ZooError(f"{folder / 'README.md'}: the card records no recipe (train commands), so the model cannot be "
                       "rebuilt; build it again with --recipe \"catcap train ...\"")
    return [*card["recipe"], *([card["evaluate"]] if card.get("evaluate") else []), card["build"]]
