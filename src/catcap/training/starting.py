"""What a run starts from: checks that ``--resume`` and ``train.init_from`` fit the configured
model (naming every differing setting, before any data is read), and the adaptive AWC betas
that go with a checkpoint's weights."""

from __future__ import annotations

from pathlib import Path

import torch

from catcap.config import to_dict
from catcap.training.checkpoint import load_trainer_state
from catcap.training.experiment import ExperimentConfig

FREE_ON_RESUME = ("model.dropout", "model.max_len")  # settings a resumed run may change


def config_differences(saved: dict, now: dict, sections=("model",)) -> dict[str, tuple]:
    """{dotted key: (checkpoint value, config value)} for every differing key of ``sections``."""
    def flat(d, prefix):
        for k, v in d.items():
            yield from flat(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)]

    out = {}
    for section in sections:
        old, new = saved, now
        for part in section.split("."):
            old, new = old.get(part, {}), new.get(part, {})
        a, b = dict(flat(old, section + ".")), dict(flat(new, section + "."))
        out.update({k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)})
    return out


def check_resumable(saved: dict, cfg: ExperimentConfig, source, log) -> None:
    """``--resume`` continues the same model: refuse, before any data is read, a config whose
    ``model.*`` or ``train.awc.enabled/mode`` differ from the checkpoint's (dropout and max_len
    may change), or whose ``train.objective`` does (except ``xe`` -> ``xe_then_scst``, which lets
    an XE run go on into SCST). Every other changed ``data.*`` / ``train.*`` setting is logged:
    it takes effect from the resumed step on."""
    diffs = config_differences(saved, to_dict(cfg), ("model", "data", "train"))
    fatal = {k: v for k, v in diffs.items() if (k.startswith("model.") and k not in FREE_ON_RESUME)
             or k in ("train.awc.enabled", "train.awc.mode")
             or (k == "train.objective" and not _objective_may_change(*v))}
    if fatal:
        raise ValueError(f"--resume continues the run in {source}, but the config describes a different one: "
                         + _list(fatal) + ". Resume with the checkpoint's settings (its config.json), or start "
                         "a new run in another out_dir (train.init_from=<this run>/best starts from its weights)")
    for key, (old, new) in diffs.items():
        log(f"[catcap] resuming with {key} changed from {old!r} to {new!r}")


def _objective_may_change(old, new) -> bool:
    """Same objective (a checkpoint older than the setting ran XE), or an XE run going on into SCST."""
    return (old or "xe") in (new, "xe") and new in (old or "xe", "xe_then_scst")


def load_start_weights(model, start: dict, cfg: ExperimentConfig, source) -> None:
    """``train.init_from``: load another run's weights, or say which settings make them not fit."""
    try:
        model.load_state_dict(start["weights"])
    except RuntimeError as err:
        diffs = config_differences(start["config"], to_dict(cfg))
        why = _list(diffs) if diffs else str(err).splitlines()[0]
        raise ValueError(f"train.init_from={source}: its weights do not fit the configured model ({why}); "
                         "use the model settings of that checkpoint (its config.json) or another checkpoint") from None


def _list(diffs: dict) -> str:
    return "; ".join(f"{k} is {old!r} in the checkpoint, {new!r} in the config" for k, (old, new) in diffs.items())


def load_awc_betas(awc, checkpoint, log) -> None:
    """Adaptive AWC: load the betas learned with ``checkpoint``'s weights, when it has betas of
    this shape; else (and for fixed AWC) the configured beta stays."""
    folder = Path(checkpoint)
    if not isinstance(awc.beta, torch.nn.Parameter) or not (folder / "trainer.json").is_file():
        return  # fixed AWC keeps its configured beta
    saved = load_trainer_state(folder).get("awc")
    if saved is None or {k: tuple(v.shape) for k, v in saved.items()} != \
            {k: tuple(v.shape) for k, v in awc.state_dict().items()}:
        log(f"[catcap] {folder} holds no AWC betas of this shape; AWC starts from train.awc.beta")
        return
    awc.load_state_dict(saved)
    log(f"[catcap] AWC betas from {folder}")
