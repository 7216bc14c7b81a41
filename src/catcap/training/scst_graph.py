"""SCST's update replayed as one CUDA graph.

An SCST step is sampling (no grad; replayed as a CUDA graph by :mod:`catcap.decoding.graphs`),
the reward (CIDEr-D, on the CPU) and the update: one teacher-forced pass over the R = B * n drawn
captions, the policy loss, backward, gradient clipping and the fused Adam step. On a GPU at the
paper's size the update is a few thousand small kernels, bound by their launches as decoding is
(issue 39; benchmarks/results/gpu.md), so it too is recorded once and replayed:

    static shape    the captions padded to ``max_len + 1`` columns (:meth:`Drawn.padded`: the
                    added positions are not chosen, so loss and gradients are unchanged); the
                    regions to the most a batch has had so far, rounded up to a multiple of
                    :data:`REGION_STEP` (masked, as a batch pads its shorter images): stores with
                    a varying region count would otherwise make every batch a new shape
    capture         inputs copied into buffers of the graph; forward + backward run twice on a
                    side stream (lazy initialisations happen outside the capture; the gradients
                    are then dropped); forward, backward, clipping and the optimizer step recorded
    replay          inputs copied in, ``graph.replay()``; the parameters' ``.grad`` point at the
                    graph's gradients; the loss, entropy and AWC value read from its outputs

A capture records nothing but kernels, so it does not update: the step that captures then
replays. The key of a graph is everything its kernels depend on: the batch's shapes, dtypes and
device, the autocast mode, the optimizer (object, learning rates, clipping) and the addresses of
the parameters and of the optimizer's state (a resumed or rebuilt optimizer needs a new capture).

The update runs eagerly where a graph cannot serve it, and :meth:`UpdateGraphs.why_eager` says why:
not a CUDA device; ``train.scst.cuda_graph: false``; several processes (DDP all-reduces gradients
during the backward); several micro-batches (a captured backward writes the gradients, it does
not add to them); fp16 (the loss scaler decides on the host whether to step); ``train.deterministic``
(the warm-up passes draw dropout numbers, so a resumed run would not draw what the uninterrupted
one did); an optimizer without state yet (its first step creates the state: that step is eager,
the next one captures); or a capture that failed (its error is logged once, and that key's
updates run eagerly from then on, through the same function on the same padded inputs). Parameters that get no gradient in SCST
(AWC's betas, unless ``train.scst.keep_awc``) have no gradient in the graph either: Adam skips them.
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager

import torch
from torch import Tensor

from catcap.decoding.graphs import parameters_key, warm_up
from catcap.training.scst import Drawn, update_loss

#: region counts are padded up to a multiple of this (fewer shapes, hence fewer captures)
REGION_STEP = 16


@contextmanager
def capturable(optimizer):
    """The optimizer's groups marked ``capturable`` while a step is recorded (its kernels are
    the same; torch refuses to record a step of a group not so marked). Restored afterwards, so
    checkpoints keep the optimizer's own settings."""
    before = [group.get("capturable", False) for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["capturable"] = True
    try:
        yield
    finally:
        for group, flag in zip(optimizer.param_groups, before):
            group["capturable"] = flag


class CapturedUpdate:
    """One recorded update: input buffers, the graph, its outputs and the gradients it writes
    (kept here: the trainer drops ``.grad`` before every step, the graph still writes them)."""

    def __init__(self, inputs: list[Tensor], graph, outputs: tuple, params: list, grads: list):
        self.inputs, self.graph, self.outputs, self.params, self.grads = inputs, graph, outputs, params, grads

    def __call__(self, inputs: list[Tensor]) -> tuple:
        for buffer, value in zip(self.inputs, inputs):
            buffer.copy_(value)
        self.graph.replay()
        for p, g in zip(self.params, self.grads):
            p.grad = g
        return self.outputs


def capture_cuda(inputs: list[Tensor], run, optimizer, params: list) -> CapturedUpdate:
    """Record ``run(inputs, step=True)`` (forward, backward, clip, optimizer step) on the inputs'
    CUDA device, after warm-up runs without the step on a side stream (:func:`warm_up`; module doc)."""
    static = [t.clone() for t in inputs]
    warm_up(static[0].device, lambda: run(static, step=False))
    for p in params:
        p.grad = None  # the captured backward allocates the gradients in the graph's memory
    graph = torch.cuda.CUDAGraph()
    with capturable(optimizer), torch.cuda.graph(graph):
        outputs = run(static, step=True)
    return CapturedUpdate(static, graph, outputs, params, [p.grad for p in params])


class UpdateGraphs:
    """SCST updates by key (module doc), at most ``max_graphs`` (a full batch and an epoch's last,
    smaller one), least recently used out. ``capture(inputs, run, optimizer, params)`` records one
    (:func:`capture_cuda`; tests pass a stand-in to check the rest on a CPU together with
    ``devices=("cpu",)``); ``captures`` counts them, ``refused`` maps a key whose capture failed to
    its error."""

    def __init__(self, precision, grad_clip: float, clip_mode: str, length: int, pad_id: int, *, enabled: bool = True,
                 log=print, capture=capture_cuda, devices: tuple = ("cuda",), max_graphs: int = 2):
        self.precision, self.grad_clip, self.clip_mode = precision, grad_clip, clip_mode
        self.length, self.pad_id, self.enabled, self.log = length, pad_id, enabled, log
        self.capture, self.devices, self.max_graphs = capture, devices, max_graphs
        self.graphs: OrderedDict = OrderedDict()
        self.refused: dict = {}
        self.captures, self.regions = 0, 0
        self._said: set = set()

    def why_eager(self, features: Tensor, optimizer, params: list, micro_batches: int, world: int,
                  deterministic: bool) -> str | None:
        """Why this step's update cannot be a graph (module doc), or None."""
        if features.device.type not in self.devices:
            return f"SCST's update is replayed as a graph on CUDA only ({features.device.type} here)"
        if not self.enabled:
            return "train.scst.cuda_graph is false"
        if world > 1:
            return f"{world} processes: DDP all-reduces the gradients during the backward"
        if micro_batches > 1:
            return f"{micro_batches} micro-batches (train.accumulate): a captured backward writes gradients, it does not add"
        if self.precision.scaler.is_enabled():
            return "fp16: the loss scaler decides on the host whether to step (bf16 or fp32 can be replayed)"
        if deterministic:
            return "train.deterministic: a capture's warm-up draws dropout numbers a resumed run would not draw"
        if not optimizer.state:  # after a step, parameters without state get no gradient in SCST (AWC's betas)
            return "the optimizer has no state yet (its first step creates it; later steps are replayed)"
        return None

    def say_once(self, reason: str) -> None:
        """Log why updates run eagerly, once per reason (not on a CPU, where that is the rule)."""
        if reason not in self._said and "CUDA only" not in reason:
            self._said.add(reason)
            self.log(f"[catcap] SCST updates run eagerly: {reason}")

    def key(self, inputs: list[Tensor], optimizer, params: list, model) -> tuple:
        device = inputs[0].device
        autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
        state = tuple(t.data_ptr() for s in optimizer.state.values() for t in s.values() if isinstance(t, Tensor))
        return (tuple((tuple(t.shape), t.dtype) for t in inputs), str(device), autocast, id(optimizer),
                tuple(group["lr"] for group in optimizer.param_groups), self.grad_clip, self.clip_mode,
                parameters_key(model), tuple(p.data_ptr() for p in params), state, model.training)

    def runner(self, score, optimizer, params: list, n: int):
        """``run(inputs, step)``: the update on (features, mask, tokens, chosen, advantage); returns
        the detached loss, the summed entropy and the AWC value (or None)."""
        def run(inputs: list[Tensor], step: bool) -> tuple:
            features, mask, tokens, chosen, advantage = inputs
            with self.precision.autocast(cache=False):
                loss, entropy_sum, awc_value = update_loss(score, features, mask,
                                                           Drawn(tokens, chosen, advantage, n, {}))
            loss.backward()
            if step:
                self.precision.step(optimizer, params, self.grad_clip, self.clip_mode)
            return loss.detach(), entropy_sum, None if awc_value is None else awc_value.detach()
        return run

    def padded_regions(self, features: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """features (B, N, D) and mask (B, N) padded to the run's static region count (module doc)."""
        self.regions = max(self.regions, -(-features.shape[1] // REGION_STEP) * REGION_STEP)
        extra = self.regions - features.shape[1]
        if extra == 0:
            return features, mask
        return (torch.nn.functional.pad(features, (0, 0, 0, extra)),
                torch.nn.functional.pad(mask, (0, extra), value=False))

    def update(self, score, model, optimizer, params: list, features: Tensor, mask: Tensor, drawn: Drawn) -> tuple:
        """Run the update of ``drawn`` (the optimizer steps) and return (loss, entropy sum, awc or
        None): replayed from a graph (captured now if new), or eagerly where this key's capture failed."""
        drawn = drawn.padded(self.length, self.pad_id)
        features, mask = self.padded_regions(features, mask)
        inputs = [features, mask, drawn.tokens, drawn.chosen, drawn.advantage]
        key = self.key(inputs, optimizer, params, model)
        run = self.runner(score, optimizer, params, drawn.n)
        if key in self.refused:
            return run(inputs, step=True)
        entry = self.graphs.get(key)
        if entry is None:
            try:
                entry = self.capture(inputs, run, optimizer, params)
            except Exception as err:  # noqa: BLE001 (any capture failure: update eagerly, say why once)
                self.refused[key] = f"{type(err).__name__}: {err}"
                self.log(f"[catcap] capturing SCST's update as a CUDA graph failed, updating eagerly "
                         f"({self.refused[key]})")
                for p in params:
                    p.grad = None  # the warm-up's gradients are not this step's
                return run(inputs, step=True)
            self.captures += 1
            self.graphs[key] = entry
            while len(self.graphs) > self.max_graphs:
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(key)
        return entry(inputs)
