"""The training loop: XE (+ AWC) and self-critical training (SCST) in one loop.

Phases: a run is in phase ``xe`` or ``scst`` (``train.objective``: xe, scst, or xe_then_scst,
which switches when validation CIDEr-D has not improved for ``train.scst.switch_patience``
epochs, restarting from the best XE weights with a fresh Adam at the fixed SCST rate). SCST
stops early after ``train.scst.patience`` epochs without a better validation CIDEr-D. XE
batches are captions (one row per caption), SCST batches are images with all references.

Determinism and resume: batches of epoch e are a permutation drawn from a generator seeded
with (seed, e), so a resumed run sees the same batches; dropout uses the global torch RNG,
whose state (with numpy's and Python's) is saved in every checkpoint; the DataLoader gets
its own generator so that creating it does not consume the global RNG. A run killed at any
step and resumed from its last checkpoint ends with the same weights as an uninterrupted run,
and with the same ``log.jsonl``: one run per log (:mod:`catcap.training.runlog`).

Scale (``catcap.training.distributed``, ``precision``): under torchrun each process takes its
share of every global batch and DistributedDataParallel (around :class:`Objective`, the
captioner + AWC) averages the gradients; ``train.accumulate`` splits a process's share into
micro-batches; ``train.precision`` runs forward passes under autocast (fp16 with a gradient
scaler). Losses are weighted by their share of the global batch's tokens, captions or images,
so one step equals a one-process step on the whole batch.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from catcap import faults
from catcap.config import to_dict
from catcap.data.collate import collate_captions, collate_images
from catcap.data.vocab import Vocab
from catcap.folders import restore_aside
from catcap.machine import describe
from catcap.models.linear import cpu_gemm_backend
from catcap.progress import progress_bar
from catcap.training import runlog
from catcap.training.awc import make_awc
from catcap.training.checkpoint import load_checkpoint, save_checkpoint
from catcap.training.distributed import all_sum, barrier, gather_rng_states, setup_distributed
from catcap.training.experiment import ExperimentConfig
from catcap.training.objective import Objective, count_targets, uses_all_parameters
from catcap.training.precision import Precision
from catcap.training.schedule import learning_rate, set_learning_rate
from catcap.training.scheduled_sampling import sampling_probability
from catcap.training.rng import restore_rng, rng_state
from catcap.training.scst_steps import ScstSteps
from catcap.training.setup import make_model, make_optimizer, prepare_data, seed_everything, use_deterministic
from catcap.training.starting import check_resumable, load_awc_betas, load_start_weights
from catcap.training.validate import validate


@dataclass
class Position:
    """Where the run is: optimizer steps done, current epoch, batches done in that epoch."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    best_cider: float = -1.0
    best_epoch: int = -1
    phase: str = "xe"
    stale_epochs: int = 0
    stopped: bool = False


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The batches of one epoch: a seeded permutation of 0..n-1 cut into batches."""
    g = torch.Generator().manual_seed(seed * 100003 + epoch)
    order = torch.randperm(n, generator=g).tolist()
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def split_batch(batch: list[int], rank: int, world: int, parts: int) -> list[list[int]]:
    """This process's micro-batches of a global batch: its share ``batch[rank::world]`` cut into
    ``parts`` contiguous pieces (sizes differ by at most one)."""
    mine = batch[rank::world]
    return [mine[j * len(mine) // parts:(j + 1) * len(mine) // parts] for j in range(parts)]


def _quiet(*_args, **_kwargs) -> None:
    """The log of ranks other than 0."""


class Trainer:
    """One experiment's training run (see the module docstring for the guarantees)."""

    def __init__(self, cfg: ExperimentConfig, *, resume: bool = False, log=print):
        self.cfg = cfg
        self.dist = setup_distributed(cfg.train.device)
        self.log = log if self.dist.is_main else _quiet
        self.out = Path(cfg.out_dir)
        self.device = self.dist.device
        self._machine: dict | None = None  # this start's machine.jsonl line, until the first log record
        if cfg.train.deterministic:
            use_deterministic(self.device)
        if self.dist.world * cfg.train.accumulate > cfg.train.batch_size:
            raise ValueError(f"{self.dist.world} processes x train.accumulate={cfg.train.accumulate} micro-batches "
                             f"is more than train.batch_size={cfg.train.batch_size} captions: every micro-batch needs "
                             "one; raise train.batch_size or lower train.accumulate / the process count")
        if resume:  # a kill between the two renames of a save leaves "last" aside: put it back first
            restore_aside(self.out / "last")
        resumed = load_checkpoint(self.out / "last", with_trainer=True) if resume and (self.out / "last").exists() else None
        start = resumed or (load_checkpoint(cfg.train.init_from) if cfg.train.init_from else None)
        if resumed:
            check_resumable(resumed["config"], cfg, self.out / "last", self.log)
        vocab = Vocab.from_dict(start["vocab"]) if start else None
        self.data = prepare_data(cfg, vocab)
        seed_everything(cfg.train.seed)
        self.model = make_model(cfg, self.data.vocab).to(self.device)
        if start is not None and not resumed:
            load_start_weights(self.model, start, cfg, cfg.train.init_from)
            self.log(f"[catcap] weights and vocabulary from {cfg.train.init_from}")
        self.awc = make_awc(cfg)
        if self.awc is not None:
            self.awc.to(self.device)
            if start is not None and not resumed:
                load_awc_betas(self.awc, cfg.train.init_from, self.log)
        self.objective = Objective(self.model, self.awc, cfg.train.scst.keep_awc)
        if cfg.train.compile:
            self.objective.compile_forward()
        self.precision = Precision(cfg.train.precision, self.device)
        self.scst = ScstSteps(cfg, self.data, self.out, self.dist, self.precision, self.log)
        if self.dist.rank > 0:  # every rank its own dropout/sampling stream (rank 0 = one-process run)
            torch.manual_seed(cfg.train.seed + 7919 * self.dist.rank)
        self.pos = Position(phase="scst" if cfg.train.objective == "scst" else "xe")
        self._fresh_scst_start = self.pos.phase == "scst" and start is not None and not resumed
        self.optimizer = self._make_optimizer()
        if resumed:
            self._restore(resumed)
        elif resume:
            self.log(f"[catcap] nothing to resume in {self.out}; starting a new run")
        else:
            self._warn_replacing()
        if self.dist.is_main:
            self._start_log(resumed is not None)
        self.engine = self._wrap()
        if self.dist.enabled:
            self.log(f"[catcap] {self.dist.world} processes ({self.device.type}); global batch {cfg.train.batch_size}")
        if self.device.type == "cpu" and cpu_gemm_backend() == "onednn":
            self.log("[catcap] CPU Linear layers run through oneDNN (catcap.models.linear; CATCAP_CPU_GEMM=torch for MKL)")

    def _warn_replacing(self) -> None:
        """A new run in an out_dir with an earlier run's checkpoints replaces them as it saves: say so."""
        earlier = [name for name in ("best", "last") if (self.out / name / "config.json").is_file()]
        if earlier:
            self.log(f"[catcap] {self.out} holds checkpoints of an earlier run ({', '.join(earlier)}); this new run "
                     "replaces them as it saves (--resume continues that run instead; another out_dir keeps it)")

    def _wrap(self):
        """The module a step's forward goes through: :class:`Objective`, in DDP when distributed."""
        if not self.dist.enabled:
            return self.objective
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(self.objective, device_ids=ids,
                                       find_unused_parameters=not uses_all_parameters(self.objective, self.pos.phase))

    def _make_optimizer(self):
        """Adam for the current phase (SCST: a fixed learning rate, no schedule)."""
        lr = self.cfg.train.scst.lr if self.pos.phase == "scst" else 1.0
        return make_optimizer(self._parameters(), self.device, lr=lr)

    def _parameters(self) -> list:
        """What the optimizer updates: the model and, with adaptive AWC, the betas."""
        return list(self.model.parameters()) + (list(self.awc.parameters()) if self.awc is not None else [])

    def _restore(self, ckpt: dict) -> None:
        self.model.load_state_dict(ckpt["weights"])
        t = ckpt["trainer"]
        if self.awc is not None:
            self.awc.load_state_dict(t["awc"])
        self.pos = Position(**t["position"])
        self.optimizer = self._make_optimizer()
        self.optimizer.load_state_dict(t["optimizer"])
        if self.pos.phase == "scst":  # XE sets its rate every step; SCST's fixed rate is the config's
            set_learning_rate(self.optimizer, self.cfg.train.scst.lr)
        self.precision.load_state_dict(t.get("precision") or {})
        restore_rng(t["rng"], self.device)
        ranks, gpu_ranks = t.get("rng_ranks") or [], t.get("cuda_rng_ranks") or []
        if len(ranks) == self.dist.world and self.dist.enabled:
            torch.set_rng_state(ranks[self.dist.rank])
            if len(gpu_ranks) == self.dist.world and self.device.type == "cuda":
                torch.cuda.set_rng_state(gpu_ranks[self.dist.rank], self.device)
        elif self.dist.enabled or len(ranks) > 1:
            self.log(f"[catcap] the checkpoint was written by {max(len(ranks), 1)} process(es), this run has "
                     f"{self.dist.world}: the weights, optimizer and position resume exactly, the dropout streams "
                     "of ranks > 0 restart from their seeds")
            if self.dist.rank > 0:
                torch.manual_seed(self.cfg.train.seed + 7919 * self.dist.rank + self.pos.step)
        self.log(f"[catcap] resumed {self.out / 'last'} at step {self.pos.step} (epoch {self.pos.epoch}, batch {self.pos.batch})")

    def save(self, name: str) -> None:
        """Write checkpoint ``name`` (rank 0; every rank must call it: RNG states are gathered)."""
        rng_ranks = gather_rng_states(self.dist)
        gpu_ranks = gather_rng_states(self.dist, torch.cuda.get_rng_state(self.device)) \
            if self.device.type == "cuda" else None
        if self.dist.is_main:
            trainer = {"optimizer": self.optimizer.state_dict(), "position": asdict(self.pos),
                       "rng": rng_state(self.device)}
            if self.dist.enabled:
                trainer["rng_ranks"] = rng_ranks
                if gpu_ranks is not None:
                    trainer["cuda_rng_ranks"] = gpu_ranks
            if self.awc is not None:
                trainer["awc"] = self.awc.state_dict()
            if self.precision.state_dict():
                trainer["precision"] = self.precision.state_dict()
            save_checkpoint(self.out / name, model=self.model, config=to_dict(self.cfg),
                            vocab=self.data.vocab.to_dict(), trainer=trainer, features=dict(self.data.store.meta),
                            workdir=str(Path.cwd()))
        barrier(self.dist)

    def _start_log(self, resumed: bool) -> None:
        """One run per ``log.jsonl``; a line in ``machine.jsonl`` per start or resume (:mod:`catcap.training.runlog`)."""
        if resumed:
            dropped = runlog.rewind(self.out, self.pos.step, self.pos.epoch)
            if dropped:
                self.log(f"[catcap] {dropped} log records written after that checkpoint removed from {self.out / runlog.LOG_NAME}")
        else:
            if (moved := runlog.set_aside(self.out)) is not None:
                self.log(f"[catcap] an earlier run's log in {self.out} moved to {moved.name}")
            runlog.set_aside(self.out, runlog.MACHINE_NAME)
        # written with this start's first log record: a start killed before it leaves no line
        self._machine = {"step": self.pos.step, "epoch": self.pos.epoch, "phase": self.pos.phase,
                         "resumed": resumed, "processes": self.dist.world} | describe(self.device)

    def _log_json(self, record: dict) -> None:
        if not self.dist.is_main:
            return
        if self._machine is not None:
            runlog.note_machine(self.out, self._machine)
            self._machine = None
        runlog.append(self.out, record)

    def train_step(self, batch) -> dict:
        """One optimizer step on a batch or a list of micro-batches (XE: caption batches, SCST:
        image batches); returns the loss and its parts as floats (means over the global batch)."""
        micro = batch if isinstance(batch, list) else [batch]
        t = self.cfg.train
        self.objective.train()
        if self.pos.phase == "xe":
            set_learning_rate(self.optimizer, learning_rate(t.schedule, self.pos.step + 1, self.pos.epoch, self.cfg.model.d_model))
        self.optimizer.zero_grad(set_to_none=True)
        scst = self.pos.phase == "scst"
        record = self.scst.graphed(micro, self.model, self.objective, self.optimizer, self._parameters(),
                                   self._score) if scst else None
        if record is None:  # the graphed SCST update steps itself; every other step steps here
            record = self.scst.eager(micro, self.model, self._score, self._sync) if scst else self._xe_parts(micro)
            self.precision.step(self.optimizer, self._parameters(), t.grad_clip, t.grad_clip_mode)
        self.pos.step += 1
        return record

    def _sync(self, last: bool):
        """DDP averages gradients on the last micro-batch only."""
        return self.engine.no_sync() if (self.dist.enabled and not last) else nullcontext()

    def _xe_parts(self, micro: list) -> dict:
        """Forward + backward of every micro-batch; XE weighted by tokens, AWC by captions."""
        t, world = self.cfg.train, self.dist.world
        tokens = [count_targets(b) for b in micro]
        captions = [b.captions.shape[0] for b in micro]
        total_tokens, total_captions = all_sum([sum(tokens), sum(captions)], self.dist)
        sums, history = [0.0, 0.0], {}
        sampling = sampling_probability(t.scheduled_sampling, self.pos.epoch)
        key = "mlm" if t.mlm.enabled else "xe"  # VLP pre-training's masked-token loss takes XE's place
        for i, b in enumerate(micro):
            with self._sync(i == len(micro) - 1):
                with self.precision.autocast():
                    out = (self.engine("mlm", b, t.mlm, self._mlm_seed(i)) if t.mlm.enabled else
                           self.engine("xe", b, t.label_smoothing, sampling, t.scheduled_sampling.mode))
                loss = out[key] * (tokens[i] * world / total_tokens)
                if "awc" in out:
                    loss = loss + out["awc"] * (captions[i] * world / total_captions)
                self.precision.backward(loss)
            sums[0] += float(out[key].detach()) * tokens[i]
            sums[1] += float(out["awc"].detach()) * captions[i] if "awc" in out else 0.0
            history = {k: out[k] for k in ("history_weight",) if k in out}
        xe_sum, awc_sum = all_sum(sums, self.dist)
        record = {key: xe_sum / total_tokens, **history}
        record["loss"] = xe_sum / total_tokens
        if t.scheduled_sampling.enabled:
            record["sampling"] = sampling
        if self.awc is not None:
            record["awc"] = awc_sum / total_captions
            record["loss"] += record["awc"]
            record["beta"] = self.awc.beta.detach().cpu().tolist()
        return record

    def _mlm_seed(self, micro_index: int) -> int:
        """The masks of a pre-training micro-batch are drawn from (seed, step, process, micro-batch)
        alone, so that a resumed run draws what the uninterrupted one did."""
        t = self.cfg.train
        return ((t.seed * 1_000_003 + self.pos.step) * 257 + self.dist.rank) * 64 + micro_index

    def _score(self, *args):
        """SCST's scoring pass through the step's module (Objective.scst, in DDP when distributed)."""
        return self.engine("scst", *args)

    def _train_set(self):
        """The dataset and collate function of the current phase."""
        if self.pos.phase == "scst":
            return self.scst.images, collate_images
        return self.data.train, collate_captions

    def _loader(self, batches: list[list[int]]) -> DataLoader:
        dataset, collate = self._train_set()
        workers = self.cfg.train.num_workers
        return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=workers,
                          generator=torch.Generator(), pin_memory=self.device.type == "cuda",
                          persistent_workers=False, prefetch_factor=4 if workers else None)

    def fit(self) -> Position:
        """Train until ``train.epochs`` (or ``train.max_steps``); returns the final position."""
        t = self.cfg.train
        if self._fresh_scst_start:
            self._validate_start()
        while self.pos.epoch < t.epochs and not self._done():
            self._run_epoch()
            if self._done() and self.pos.batch != 0:
                break
            self._end_epoch()
        self.save("last")
        return self.pos

    def _done(self) -> bool:
        return 0 < self.cfg.train.max_steps <= self.pos.step or self.pos.stopped

    def _epoch_plan(self) -> list[list[int]]:
        """The global batches of this epoch; one with fewer items than processes x micro-batches
        (possible only for an epoch's last batch) is left out, as every micro-batch needs an item."""
        t = self.cfg.train
        batches = epoch_batches(len(self._train_set()[0]), t.batch_size, t.seed, self.pos.epoch)
        return [b for b in batches if len(b) >= self.dist.world * t.accumulate]

    def _run_epoch(self) -> None:
        t = self.cfg.train
        batches = self._epoch_plan()
        todo = batches[self.pos.batch:]
        micro = [m for b in todo for m in split_batch(b, self.dist.rank, self.dist.world, t.accumulate)]
        bar = progress_bar(total=len(batches), initial=self.pos.batch, unit="batch",
                           desc=f"{self.pos.phase} epoch {self.pos.epoch + 1}/{t.epochs}",
                           enabled=t.progress and self.dist.is_main)
        start, done_here = time.perf_counter(), 0
        loader = iter(self._loader(micro))
        for _ in todo:
            parts = self.train_step([next(loader).to(self.device, non_blocking=self.device.type == "cuda")
                                     for _ in range(t.accumulate)])
            self.pos.batch += 1
            done_here += 1
            bar.set_postfix(loss=f"{parts['loss']:.3f}", lr=f"{self.optimizer.param_groups[0]['lr']:.2e}", refresh=False)
            bar.update(1)
            if self.pos.step % t.log_every == 0:
                self._log_json({"kind": "train", "phase": self.pos.phase, "step": self.pos.step, "epoch": self.pos.epoch, **parts,
                                "lr": self.optimizer.param_groups[0]["lr"],
                                "batches_per_s": done_here / max(time.perf_counter() - start, 1e-9)})
            if t.save_every and self.pos.step % t.save_every == 0:
                self.save("last")
            if self._done():
                break
        bar.close()

    def _validate_start(self) -> None:
        """SCST from ``train.init_from``: score the start weights first, so that "best" is only
        replaced by an SCST epoch that beats them (and the log holds the point SCST starts from)."""
        corpus = self._validate({"phase": "start", "step": 0, "epoch": -1}, "start weights (train.init_from)")
        self.pos.best_cider, self.pos.best_epoch = corpus["CIDEr"], 0
        self.save("best")

    def _validate(self, record: dict, what: str) -> dict:
        """Score the current weights on the validation split; log ``record`` + the scores to
        log.jsonl and ``what: val ...`` to the console; returns the corpus scores."""
        t = self.cfg.train
        ev, _ = validate(self.model, self.data.val, self.data.vocab, self.device, t.eval_batch_size,
                         t.validation_generation(), progress=t.progress, ctx=self.dist, autocast=self.precision.autocast)
        self._log_json({"kind": "val", **record, **ev.corpus})
        self.log(f"[catcap] {what}: val " + ", ".join(f"{k} {v:.3f}" for k, v in ev.corpus.items()))
        return ev.corpus

    def _end_epoch(self) -> None:
        pos = self.pos
        cider = self._validate({"phase": pos.phase, "step": pos.step, "epoch": pos.epoch},
                               f"epoch {pos.epoch + 1} ({pos.phase})")["CIDEr"]
        self.pos.epoch += 1
        self.pos.batch = 0
        if cider > self.pos.best_cider:
            self.pos.best_cider, self.pos.best_epoch, self.pos.stale_epochs = cider, self.pos.epoch, 0
            self.save("best")
        else:
            self.pos.stale_epochs += 1
        self._next_phase()
        self.save("last")

    def _next_phase(self) -> None:
        """Switch XE -> SCST (xe_then_scst) or stop SCST when validation CIDEr-D stalls."""
        t, pos = self.cfg.train, self.pos
        if pos.phase == "xe" and t.objective == "xe_then_scst" and pos.stale_epochs >= t.scst.switch_patience:
            self.model.load_state_dict(load_checkpoint(self.out / "best")["weights"])
            if self.awc is not None:
                load_awc_betas(self.awc, self.out / "best", self.log)
            pos.phase, pos.stale_epochs = "scst", 0
            self.optimizer = self._make_optimizer()
            self.engine = self._wrap()
            faults.point("train.scst_switch")
            self.log(f"[catcap] XE validation CIDEr-D has not improved for {t.scst.switch_patience} epochs: "
                     f"switching to SCST from the best XE weights (epoch {pos.best_epoch}, CIDEr-D {pos.best_cider:.3f})")
        elif pos.phase == "scst" and pos.stale_epochs >= t.scst.patience:
            pos.stopped = True
            self.log(f"[catcap] SCST validation CIDEr-D has not improved for {t.scst.patience} epochs: stopping")
