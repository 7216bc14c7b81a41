"""The experiment config: data + model + training, one YAML file (plus overrides)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from catcap.data.config import DataConfig
from catcap.models.config import ModelConfig
from catcap.training.schedule import ScheduleConfig


@dataclass
class TrainConfig:
    """``train:`` section. Paper settings (SPEC.md §4): Adam, noam with 10,000 warm-up steps,
    batch 50. ``save_every`` (steps) adds mid-epoch checkpoints for resuming long epochs;
    ``max_steps`` stops early (tests, quick looks); validation decodes greedily up to
    ``val_max_len`` words and picks the best checkpoint by CIDEr-D."""

    epochs: int = 30
    batch_size: int = 50
    eval_batch_size: int = 50
    seed: int = 0
    label_smoothing: float = 0.0
    grad_clip: float = 1.0
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    num_workers: int = 0
    save_every: int = 0
    max_steps: int = 0
    log_every: int = 20
    val_max_len: int = 20
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: bool = True


@dataclass
class ExperimentConfig:
    """Everything one training run needs. ``out_dir`` receives checkpoints and logs."""

    name: str = "experiment"
    out_dir: str = "runs/experiment"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
