"""Where a model's training data files are: ``config.data.dataset`` and ``config.data.features`` as
recorded in a checkpoint (or zoo) folder, opened from here the way the loader opens them. No
torch: ``catcap`` checks these paths against a command's outputs before any model loads
(catcap/cli/paths.py), and :meth:`catcap.inference.captioner.Captioner.data_file` uses the same rule."""

from __future__ import annotations

import json
from pathlib import Path


def data_path(value: str, workdir: str | None) -> str:
    """A recorded data path as a path that opens from here: a relative path is taken from the
    current folder when it exists there, else from the training run's working folder."""
    path = Path(value)
    if path.is_absolute() or path.exists() or not workdir:
        return str(path)
    moved = Path(workdir) / path
    return str(moved) if moved.exists() else str(path)


def recorded_data_file(folder: str | Path, name: str) -> str | None:
    """``config.data.<name>`` of the checkpoint or zoo ``folder`` (None: no readable config.json
    or no such setting; loading the model reports what is wrong)."""
    try:
        recorded = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        value = recorded["config"]["data"][name]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    workdir = recorded.get("workdir") if isinstance(recorded, dict) else None
    return data_path(value, workdir if isinstance(workdir, str) else None) if isinstance(value, str) and value else None
