"""SCST's share of a training run: what :class:`catcap.training.loop.Trainer` needs only in
phase ``scst``, built when first asked for.

    reward    CIDEr-D with the training references' document frequencies (built once and cached
              on disk next to the run; rank 0 writes the cache file, the other ranks read it)
    images    the training images with all their references (SCST batches are images; XE's are
              captions)
    graphs    the update replayed as a CUDA graph (:mod:`catcap.training.scst_graph`)

A step's losses come from :meth:`ScstSteps.graphed` (the graph steps the optimizer itself) or,
where the update cannot be a graph, from :meth:`ScstSteps.eager` (forward + backward of every
micro-batch; the trainer then steps). The algorithm itself is :mod:`catcap.training.scst`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from catcap.data.datasets import ImageDataset
from catcap.training.distributed import all_sum, barrier
from catcap.training.reward import CiderReward, cached_document_frequency
from catcap.training.scst import draw_and_reward, finished_record, scst_loss
from catcap.training.scst_graph import UpdateGraphs


class ScstSteps:
    """SCST's reward, image batches and update graphs for one run (see the module docstring).

    ``data`` is the run's prepared data (train and val records, feature store, vocabulary),
    ``dist`` its process group, ``precision`` its autocast and gradient scaling."""

    def __init__(self, cfg, data, out: Path, dist, precision, log):
        self.cfg, self.data, self.out, self.dist, self.precision, self.log = cfg, data, out, dist, precision, log
        t = cfg.train
        self.graphs = UpdateGraphs(precision, t.grad_clip, t.grad_clip_mode, t.scst.max_len + 1, data.vocab.pad_id,
                                   enabled=t.scst.cuda_graph, log=log)
        self._reward: CiderReward | None = None
        self._images: ImageDataset | None = None

    @property
    def reward(self) -> CiderReward:
        """CIDEr-D with the training references' document frequencies (built once, cached on disk)."""
        if self._reward is None:
            d = self.cfg.data
            refs = [r.captions for r in self.data.train.records]
            if not self.dist.is_main:
                barrier(self.dist)
            df, _ = cached_document_frequency(refs, d.dataset, d.train_split, self.out, self.log)
            if self.dist.is_main:
                barrier(self.dist)
            self._reward = CiderReward(df)
        return self._reward

    @property
    def images(self) -> ImageDataset:
        """The training images, each with all its references."""
        if self._images is None:
            self._images = ImageDataset(self.data.train.records, self.data.store, self.data.vocab)
        return self._images

    def eager(self, micro: list, model, score, sync) -> dict:
        """Sample, reward and score every micro-batch, backward included (the caller steps the
        optimizer); losses weighted by images. ``score`` is the step's module's scoring pass,
        ``sync(last)`` the context that lets DDP average gradients on the last micro-batch only."""
        t, world = self.cfg.train, self.dist.world
        images = [b.features.shape[0] for b in micro]
        (total_images,) = all_sum([sum(images)], self.dist)
        totals: dict[str, float] = defaultdict(float)
        for i, b in enumerate(micro):
            with sync(i == len(micro) - 1):
                with self.precision.autocast():
                    loss, rec = scst_loss(model, b, self.data.vocab, t.scst, self.reward, score=score)
                self.precision.backward(loss * (images[i] * world / total_images))
            for k, v in {**rec, "loss": float(loss.detach())}.items():
                totals[k] += v * images[i]
        keys = sorted(totals)
        return {k: v / total_images for k, v in zip(keys, all_sum([totals[k] for k in keys], self.dist))}

    def graphed(self, micro: list, model, objective, optimizer, params: list, score) -> dict | None:
        """The step with its update replayed as a CUDA graph (the optimizer steps inside), or
        None where it cannot be (the reason logged once; the caller then runs :meth:`eager`)."""
        b = micro[0]
        why = self.graphs.why_eager(b.features, optimizer, params, len(micro), self.dist.world,
                                    self.cfg.train.deterministic)
        if why is not None:
            self.graphs.say_once(why)
            return None
        with self.precision.autocast():  # sampling under the run's precision, as on the eager path
            drawn = draw_and_reward(model, b, self.data.vocab, self.cfg.train.scst, self.reward)
        objective.train()
        loss, entropy_sum, awc_value = self.graphs.update(score, model, optimizer, params, b.features,
                                                          b.feature_mask, drawn)
        return {**finished_record(drawn, entropy_sum, awc_value), "loss": float(loss.detach())}
