"""The experiment config: data + model + training, one YAML file (plus overrides)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from catcap.config import path_field
from catcap.data.config import DataConfig
from catcap.models.config import ModelConfig
from catcap.training.awc import AWCConfig
from catcap.training.schedule import ScheduleConfig
from catcap.training.mlm import MLMConfig
from catcap.training.scheduled_sampling import ScheduledSamplingConfig
from catcap.training.scst import SCSTConfig


HISTORY_VARIANTS = ("caca", "light_caca")  # cross attentions that report history weights
# what a run writes into out_dir (catcap.training.loop, runlog, reward): the rest of the folder is kept
RUN_FILES = ("best", "last", "log.jsonl", "log.*.jsonl", "machine.jsonl", "machine.*.jsonl", "training.png",
             "*.cider-df.npz", ".*.tmp-*", ".*.old")


@dataclass
class TrainConfig:
    """``train:`` section. Paper settings (SPEC.md §4): Adam, noam with 10,000 warm-up steps,
    batch 50. ``save_every`` (steps) adds mid-epoch checkpoints for resuming long epochs;
    ``max_steps`` stops early (tests, quick looks); validation decodes greedily up to
    ``val_max_len`` words, with the rules of ``catcap evaluate`` (never ``<unk>``), and picks the best checkpoint by CIDEr-D; ``awc`` adds the adaptive
    weight constraint of CAT/LightCAT to the XE loss (``catcap.training.awc``).
    ``objective``: ``xe``; ``scst`` (self-critical from the first step, usually with
    ``init_from`` = an XE checkpoint whose weights and vocabulary start the run); or
    ``xe_then_scst`` (switch when validation CIDEr-D stalls, ``scst.switch_patience``).
    ``grad_clip`` (0 = off) bounds the global gradient norm, or with ``grad_clip_mode: value``
    every gradient element (the LSTM anchors' rule; AoANet's recipe clamps at 0.1).
    ``val_beam``: beam size of validation decoding (1 = greedy; the paper evaluates with 5);
    ``val_beam`` and ``val_max_len`` make validation's GenerationConfig (:meth:`validation_generation`).
    ``awc`` also applies during SCST only when ``scst`` is asked to keep it (off by default).
    ``device``: auto (CUDA when available) | cpu | cuda. ``precision``: fp32 | bf16 | fp16
    (autocast; fp16 with a gradient scaler; ``catcap.training.precision``). ``accumulate``: each
    global batch is split into this many micro-batches per process, gradients summed (the
    step equals the full batch's). ``compile``: ``torch.compile`` the captioner's training
    forward. ``scheduled_sampling``: feed the model some of its own predictions in XE training
    (``catcap.training.scheduled_sampling``; the LSTM presets turn it on). ``deterministic``: on a
    GPU, deterministic kernels only (``catcap.training.setup.use_deterministic``), so that a run
    and the same run killed and resumed end with identical weights; slower. CPU runs are
    deterministic without it. ``mlm``: VLP's
    masked-token pre-training in place of captioning XE (``catcap.training.mlm``). Under torchrun, ``batch_size`` is the global batch over all processes
    (``catcap.training.distributed``)."""

    epochs: int = 30
    batch_size: int = 50
    eval_batch_size: int = 50
    seed: int = 0
    label_smoothing: float = 0.0
    grad_clip: float = 1.0
    grad_clip_mode: Literal["norm", "value"] = "norm"
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    num_workers: int = 0
    save_every: int = 0
    max_steps: int = 0
    log_every: int = 20
    val_max_len: int = 20
    device: Literal["auto", "cpu", "cuda"] = "auto"
    progress: bool = True
    awc: AWCConfig = field(default_factory=AWCConfig)
    objective: Literal["xe", "scst", "xe_then_scst"] = "xe"
    scst: SCSTConfig = field(default_factory=SCSTConfig)
    init_from: str = path_field("", "input")
    val_beam: int = 1
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    accumulate: int = 1
    compile: bool = False
    deterministic: bool = False
    scheduled_sampling: ScheduledSamplingConfig = field(default_factory=ScheduledSamplingConfig)
    mlm: MLMConfig = field(default_factory=MLMConfig)

    def __post_init__(self):
        from catcap.config import check_at_least

        check_at_least("train", self, {"epochs": 1, "batch_size": 1, "eval_batch_size": 1, "label_smoothing": 0.0,
                                       "grad_clip": 0.0, "num_workers": 0, "save_every": 0, "max_steps": 0,
                                       "log_every": 1, "accumulate": 1})
        from catcap.config import ConfigError

        self.validation_generation()  # train.val_beam / val_max_len checked as generation settings

        if self.label_smoothing >= 1:
            raise ConfigError(f"train.label_smoothing must be < 1, found {self.label_smoothing!r}")
        if self.accumulate > self.batch_size:
            raise ConfigError(f"train.accumulate ({self.accumulate} micro-batches) is larger than train.batch_size "
                              f"({self.batch_size}): every micro-batch needs at least one caption; use "
                              "train.accumulate <= train.batch_size")

    def validation_generation(self):
        """Validation's :class:`~catcap.decoding.GenerationConfig`: beam ``val_beam`` (1 = greedy),
        at most ``val_max_len`` words; a bad value is a ConfigError naming the YAML key."""
        from catcap.decoding.config import build_generation_config

        return build_generation_config({"num_beams": self.val_beam, "max_length": self.val_max_len},
                                       names={"num_beams": "train.val_beam", "max_length": "train.val_max_len"})


@dataclass
class ExperimentConfig:
    """Everything one training run needs. ``out_dir`` receives checkpoints and logs."""

    name: str = "experiment"
    out_dir: str = path_field("runs/experiment", "output", RUN_FILES)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        if self.train.awc.enabled and self.model.cross_attention not in HISTORY_VARIANTS:
            from catcap.config import ConfigError

            raise ConfigError(f"train.awc.enabled=true needs a cross attention with a history memory "
                              f"({' or '.join(HISTORY_VARIANTS)}), found model.cross_attention={self.model.cross_attention!r}; "
                              "set model.cross_attention=caca or train.awc.enabled=false")
        if self.train.mlm.enabled:
            self._check_mlm()

    def _check_mlm(self) -> None:
        """Masked-token pre-training needs the one-stream model, in the XE phase, on its own."""
        from catcap.config import ConfigError
        from catcap.models.vlp import VLPDecoder
        from catcap.registry import DECODERS

        if not issubclass(DECODERS.get(self.model.decoder), VLPDecoder):
            raise ConfigError(f"train.mlm.enabled=true pre-trains the one-stream VLP model (model.decoder=vlp), found "
                              f"model.decoder={self.model.decoder!r}; use configs/models/vlp_small.yaml or turn train.mlm off")
        t = self.train
        clashes = [name for name, on in (("train.objective != xe", t.objective != "xe"),
                                          ("train.scheduled_sampling.enabled", t.scheduled_sampling.enabled),
                                          ("train.label_smoothing > 0", t.label_smoothing > 0)) if on]
        if clashes:
            raise ConfigError(f"train.mlm.enabled=true replaces captioning XE; it does not combine with "
                              f"{', '.join(clashes)}: turn those off for pre-training, then fine-tune with train.init_from")
