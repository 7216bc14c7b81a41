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
step and resumed from its last checkpoint ends with the same weights as an uninterrupted run.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm

from catcap.config import to_dict
from catcap.data.collate import collate_captions, collate_images
from catcap.data.datasets import ImageDataset
from catcap.data.vocab import Vocab
from catcap.training.awc import history_stats, make_awc
from catcap.training.checkpoint import load_checkpoint, save_checkpoint
from catcap.training.experiment import ExperimentConfig
from catcap.training.losses import cross_entropy
from catcap.training.reward import CiderReward, cached_document_frequency
from catcap.training.schedule import learning_rate, set_learning_rate
from catcap.training.scst import scst_loss
from catcap.training.setup import make_model, make_optimizer, pick_device, prepare_data, seed_everything
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


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": _numpy_state(), "python": random.getstate()}


def _numpy_state() -> dict:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "gauss": float(gauss)}


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    random.setstate(_as_tuples(state["python"]))


def _as_tuples(x):
    return tuple(_as_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


class Trainer:
    """XE training of one experiment (see the module docstring for the guarantees)."""

    def __init__(self, cfg: ExperimentConfig, *, resume: bool = False, log=print):
        self.cfg, self.log = cfg, log
        self.out = Path(cfg.out_dir)
        self.device = pick_device(cfg.train.device)
        resumed = load_checkpoint(self.out / "last", with_trainer=True) if resume and (self.out / "last").exists() else None
        start = resumed or (load_checkpoint(cfg.train.init_from) if cfg.train.init_from else None)
        vocab = Vocab.from_dict(start["vocab"]) if start else None
        self.data = prepare_data(cfg, vocab)
        seed_everything(cfg.train.seed)
        self.model = make_model(cfg, self.data.vocab).to(self.device)
        if start is not None and not resumed:
            self.model.load_state_dict(start["weights"])
            log(f"[catcap] weights and vocabulary from {cfg.train.init_from}")
        self._reward, self._train_images = None, None
        self.awc = make_awc(cfg)
        if self.awc is not None:
            self.awc.to(self.device)
        self.pos = Position(phase="scst" if cfg.train.objective == "scst" else "xe")
        self.optimizer = self._make_optimizer()
        if resumed:
            self._restore(resumed)
        elif resume:
            log(f"[catcap] nothing to resume in {self.out}; starting a new run")

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
        restore_rng(t["rng"])
        self.log(f"[catcap] resumed {self.out / 'last'} at step {self.pos.step} (epoch {self.pos.epoch}, batch {self.pos.batch})")

    def save(self, name: str) -> None:
        trainer = {"optimizer": self.optimizer.state_dict(), "position": asdict(self.pos), "rng": rng_state()}
        if self.awc is not None:
            trainer["awc"] = self.awc.state_dict()
        save_checkpoint(self.out / name, model=self.model, config=to_dict(self.cfg),
                        vocab=self.data.vocab.to_dict(), trainer=trainer, features=dict(self.data.store.meta))

    def _log_json(self, record: dict) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def train_step(self, batch) -> dict:
        """One optimizer step (XE on a caption batch, SCST on an image batch); returns the loss
        and its parts (floats)."""
        if self.pos.phase == "scst":
            return self._scst_step(batch)
        t = self.cfg.train
        self.model.train()
        logits, extras = self.model(batch.features, batch.feature_mask, batch.captions, batch.caption_mask)
        xe = cross_entropy(logits, batch.captions[:, 1:], batch.caption_mask[:, 1:], t.label_smoothing)
        record = {"xe": xe, **history_stats(extras, batch.caption_mask[:, :-1])}
        loss = xe
        if self.awc is not None:
            record["awc"] = self.awc(extras, batch.caption_mask[:, :-1])
            loss = xe + record["awc"]
        set_learning_rate(self.optimizer, learning_rate(t.schedule, self.pos.step + 1, self.pos.epoch, self.cfg.model.d_model))
        self._update(loss)
        record["loss"] = loss
        if self.awc is not None:
            record["beta"] = self.awc.beta.detach().cpu().tolist()
        return {k: (float(v.detach()) if torch.is_tensor(v) else v) for k, v in record.items()}

    def _update(self, loss) -> None:
        """Backward, gradient clipping, one optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.train.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self._parameters(), self.cfg.train.grad_clip)
        self.optimizer.step()
        self.pos.step += 1

    def _scst_step(self, batch) -> dict:
        t = self.cfg.train
        awc = self.awc if t.scst.keep_awc else None
        loss, record = scst_loss(self.model, batch, self.data.vocab, t.scst, self.reward, awc)
        self._update(loss)
        record["loss"] = float(loss.detach())
        return record

    @property
    def reward(self) -> CiderReward:
        """CIDEr-D with the training references' document frequencies (built once, cached on disk)."""
        if self._reward is None:
            d = self.cfg.data
            refs = [r.captions for r in self.data.train.records]
            df, _ = cached_document_frequency(refs, d.dataset, d.train_split, self.out, self.log)
            self._reward = CiderReward(df)
        return self._reward

    def _train_set(self):
        """The dataset and collate function of the current phase."""
        if self.pos.phase == "scst":
            if self._train_images is None:
                self._train_images = ImageDataset(self.data.train.records, self.data.store, self.data.vocab)
            return self._train_images, collate_images
        return self.data.train, collate_captions

    def _loader(self, batches: list[list[int]]) -> DataLoader:
        dataset, collate = self._train_set()
        return DataLoader(dataset, batch_sampler=batches, collate_fn=collate,
                          num_workers=self.cfg.train.num_workers, generator=torch.Generator())

    def fit(self) -> Position:
        """Train until ``train.epochs`` (or ``train.max_steps``); returns the final position."""
        t = self.cfg.train
        while self.pos.epoch < t.epochs and not self._done():
            self._run_epoch()
            if self._done() and self.pos.batch != 0:
                break
            self._end_epoch()
        self.save("last")
        return self.pos

    def _done(self) -> bool:
        return 0 < self.cfg.train.max_steps <= self.pos.step or self.pos.stopped

    def _run_epoch(self) -> None:
        t = self.cfg.train
        batches = epoch_batches(len(self._train_set()[0]), t.batch_size, t.seed, self.pos.epoch)
        todo = batches[self.pos.batch:]
        bar = tqdm(total=len(batches), initial=self.pos.batch, desc=f"{self.pos.phase} epoch {self.pos.epoch + 1}/{t.epochs}",
                   unit="batch", disable=not t.progress)
        start = time.perf_counter()
        for batch in self._loader(todo):
            parts = self.train_step(batch.to(self.device))
            self.pos.batch += 1
            bar.update(1)
            bar.set_postfix(loss=f"{parts['loss']:.3f}", lr=f"{self.optimizer.param_groups[0]['lr']:.2e}")
            if self.pos.step % t.log_every == 0:
                self._log_json({"kind": "train", "phase": self.pos.phase, "step": self.pos.step, "epoch": self.pos.epoch, **parts,
                                "lr": self.optimizer.param_groups[0]["lr"],
                                "batches_per_s": self.pos.batch / max(time.perf_counter() - start, 1e-9)})
            if t.save_every and self.pos.step % t.save_every == 0:
                self.save("last")
            if self._done():
                break
        bar.close()

    def _end_epoch(self) -> None:
        t = self.cfg.train
        ev, _ = validate(self.model, self.data.val, self.data.vocab, self.device, t.eval_batch_size, t.val_max_len,
                         progress=t.progress, beam=t.val_beam)
        cider = ev.corpus["CIDEr"]
        self._log_json({"kind": "val", "phase": self.pos.phase, "step": self.pos.step, "epoch": self.pos.epoch, **ev.corpus})
        self.log(f"[catcap] epoch {self.pos.epoch + 1} ({self.pos.phase}): val " + ", ".join(f"{k} {v:.3f}" for k, v in ev.corpus.items()))
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
            pos.phase, pos.stale_epochs = "scst", 0
            self.optimizer = self._make_optimizer()
            self.log(f"[catcap] XE validation CIDEr-D has not improved for {t.scst.switch_patience} epochs: "
                     f"switching to SCST from the best XE weights (epoch {pos.best_epoch}, CIDEr-D {pos.best_cider:.3f})")
        elif pos.phase == "scst" and pos.stale_epochs >= t.scst.patience:
            pos.stopped = True
            self.log(f"[catcap] SCST validation CIDEr-D has not improved for {t.scst.patience} epochs: stopping")
