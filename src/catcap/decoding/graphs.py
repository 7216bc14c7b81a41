"""CUDA graphs of static decoding: the whole loop captured once, replayed for every batch of the
same shape.

At the paper's size every decoder is bound by kernel launches and Python, not arithmetic (issue
39; benchmarks/results/gpu.md): a 17-step decode is a few thousand small kernels. The static loop
(:func:`catcap.decoding.generate.decode` with ``static=True``) reads nothing back to the host and
runs a fixed number of steps, so all of it, encoder included, can be recorded as one CUDA graph:

    capture (first call for a key):  inputs copied into buffers of the graph; a fresh strategy;
                                     2 eager warm-up runs on a side stream; the loop recorded
    replay (every call):             inputs copied in, graph.replay(), the strategy's output
                                     (search.output: host reads after the loop) cloned out

The key of a graph is everything the recorded kernels depend on: the model (object, and the
addresses of its parameters: weights updated in place, e.g. by an optimizer, are read by the
replay; new parameter tensors need a new capture), the inputs' shapes, dtypes and device, the
config, the rules (catcap's by value, others by identity), the grad and autocast modes. The
cache holds at most :attr:`GraphCache.max_graphs` graphs, least recently used first out (each
holds its private memory pool). A key dropped and then needed again is captured anew (a capture
costs about three eager decodes) and warned about once: more keys are in rotation than the cache
holds, so raise ``GRAPHS.max_graphs``.

Decoding runs eagerly (static, same tokens) where a graph cannot serve, and :meth:`GraphCache.why_eager`
says why: attention maps or history weights asked for (the per-step record is Python lists);
autograd on (grad enabled and a parameter that requires it: the graph would not record the
backward); a seeded config or an explicit generator (only the global CUDA generator is
captured: each replay then draws new numbers from it, as eager sampling does); per-member inputs
of an ensemble; graphs turned off (``generate(..., cuda_graphs=False)``, ``--no-cuda-graphs``,
or :attr:`GraphCache.enabled`); or a capture that failed: its error is kept in
:attr:`GraphCache.refused` and warned about once, and that key is decoded eagerly from then on.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import fields, is_dataclass

import torch
from torch import Tensor

from catcap.decoding.output import GenerationOutput
from catcap.decoding.processors import MaskingProcessor

WARM_UP_RUNS = 2


def rule_key(rule) -> tuple:
    """A rule as a cache key: catcap's masking rules by their settings, any other by identity
    (the cache entry keeps the rule alive, so its id is not reused)."""
    if isinstance(rule, MaskingProcessor):
        return (type(rule).__name__,) + tuple(sorted((k, repr(v)) for k, v in vars(rule).items() if not k.startswith("_")))
    return ("object", id(rule))


def parameters_key(model) -> tuple:
    """The addresses of the model's parameters and buffers (an ensemble's: every member's)."""
    members = getattr(model, "models", [model])
    return tuple(t.data_ptr() for m in members for t in (*m.parameters(), *m.buffers()))


def tensors_in(obj, depth: int = 3) -> list[Tensor]:
    """Every tensor an object holds (attributes, dataclass fields, lists, dicts), ``depth`` deep."""
    if isinstance(obj, Tensor):
        return [obj]
    if depth == 0 or obj is None or isinstance(obj, (int, float, str, bool, torch.nn.Module)):
        return []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    elif is_dataclass(obj):
        children = [getattr(obj, f.name) for f in fields(obj)]
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    else:
        return []
    return [t for child in children for t in tensors_in(child, depth - 1)]


def cloned(out: GenerationOutput) -> GenerationOutput:
    """The output with every tensor copied out of the graph's memory (the next replay overwrites it)."""
    return GenerationOutput(**{f.name: getattr(out, f.name).clone() if isinstance(getattr(out, f.name), Tensor)
                               else getattr(out, f.name) for f in fields(out)})


class CapturedDecode:
    """One captured static decode: the input buffers, the graph, and the strategy whose tensors
    the graph leaves its results in. ``keep`` holds the tensors the strategy had before the loop
    (its initial tokens, scores, buffers): the graph reads them at every replay, so they must
    outlive the loop's rebinding of the strategy's attributes."""

    def __init__(self, features: Tensor, feature_mask: Tensor, graph, search, keep: list):
        self.features, self.feature_mask, self.graph, self.search = features, feature_mask, graph, search
        self.keep = keep

    def __call__(self, features: Tensor, feature_mask: Tensor) -> GenerationOutput:
        self.features.copy_(features)
        self.feature_mask.copy_(feature_mask)
        self.graph.replay()
        return cloned(self.search.output(None))


def warm_up(device: torch.device, work) -> None:
    """Run ``work()`` :data:`WARM_UP_RUNS` times on a side stream before a capture, so that lazy
    initialisations (cuBLAS handles, autograd's streams, ...) happen outside the graph."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARM_UP_RUNS):
            work()
    torch.cuda.current_stream(device).wait_stream(side)


def capture_cuda(features: Tensor, feature_mask: Tensor, make_search, run) -> CapturedDecode:
    """Record the static loop on ``features``' CUDA device (module doc): ``make_search(mask)``
    makes a fresh static strategy, ``run(features, mask, search)`` runs the loop."""
    static_features, static_mask = features.clone(), feature_mask.clone()
    warm_up(features.device, lambda: run(static_features, static_mask, make_search(static_mask)))
    search = make_search(static_mask)
    keep = tensors_in(search)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run(static_features, static_mask, search)
    return CapturedDecode(static_features, static_mask, graph, search, keep)


class GraphCache:
    """Captured decodes by key (module doc), at most ``max_graphs``, least recently used out.
    ``capture(features, feature_mask, make_search, run)`` records one (:func:`capture_cuda`);
    ``captures`` counts them, ``recaptures`` the captures of keys dropped earlier, ``refused``
    maps a key whose capture failed to its error. An entry keeps the key's rules alive (a rule
    keyed by identity must not be freed and its id reused)."""

    def __init__(self, max_graphs: int = 8, capture=capture_cuda):
        self.max_graphs, self.capture, self.enabled = max_graphs, capture, True
        self.graphs: OrderedDict = OrderedDict()
        self.dropped: OrderedDict = OrderedDict()  # hashes of the keys dropped lately (bounded)
        self.refused: dict = {}
        self.captures = self.recaptures = 0

    def clear(self) -> None:
        self.graphs.clear()
        self.dropped.clear()
        self.refused.clear()

    def _note_capture(self, key) -> None:
        """Count a capture; a key dropped earlier means the cache is too small (module doc)."""
        self.captures += 1
        if self.dropped.pop(hash(key), None) is None:
            return
        self.recaptures += 1
        if self.recaptures == 1:
            warnings.warn(f"a CUDA graph dropped from the cache was needed again and captured anew: more than "
                          f"max_graphs={self.max_graphs} (model, batch shape, config) combinations are in use, and "
                          f"each capture costs about three eager decodes; raise "
                          f"catcap.decoding.graphs.GRAPHS.max_graphs", RuntimeWarning, stacklevel=4)

    def _drop_oldest(self) -> None:
        while len(self.graphs) > self.max_graphs:
            key, _ = self.graphs.popitem(last=False)
            self.dropped[hash(key)] = True
        while len(self.dropped) > 4 * self.max_graphs:
            self.dropped.popitem(last=False)

    def why_eager(self, model, features, config, generator) -> str | None:
        """Why this call cannot be served by a graph (module doc), or None."""
        if not self.enabled:
            return "CUDA graphs are turned off"
        if not isinstance(features, Tensor):
            return "an ensemble's per-member inputs are decoded eagerly"
        if config.records_steps:
            return "output_attentions / output_history_weights keep a per-step record in Python"
        if torch.is_grad_enabled() and any(p.requires_grad for m in getattr(model, "models", [model])
                                           for p in m.parameters()):
            return "autograd is on (a graph would not record the backward): decode under torch.no_grad()"
        if config.seed is not None or generator is not None:
            return "a seeded config or an explicit generator (only the global CUDA generator is captured)"
        return None

    def key(self, model, features: Tensor, feature_mask: Tensor, config, rules: tuple) -> tuple:
        autocast = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")) \
            if features.device.type == "cuda" else (False, None)
        return (id(model), parameters_key(model), tuple(features.shape), features.dtype, tuple(feature_mask.shape),
                str(features.device), config, tuple(rule_key(r) for r in rules), torch.is_grad_enabled(), autocast,
                getattr(model, "training", False))

    def generate(self, model, features, feature_mask, config, rules: tuple, generator, make_search,
                 run) -> GenerationOutput | None:
        """The captions from a graph (captured now if new), or None: decode eagerly.
        ``make_search(mask)``: a fresh static strategy; ``run(features, mask, search)``: the
        static loop (what :func:`catcap.decoding.generate.generate` passes)."""
        if self.why_eager(model, features, config, generator) is not None:
            return None
        key = self.key(model, features, feature_mask, config, rules)
        if key in self.refused:
            return None
        entry = self.graphs.get(key)
        if entry is None:
            try:
                entry = (self.capture(features, feature_mask, make_search, run), rules)
            except Exception as err:  # noqa: BLE001 (any capture failure: decode eagerly, say why once)
                self.refused[key] = f"{type(err).__name__}: {err}"
                warnings.warn(f"CUDA graph capture of static decoding failed, decoding eagerly instead "
                              f"({self.refused[key]})", RuntimeWarning, stacklevel=3)
                return None
            self._note_capture(key)
            self.graphs[key] = entry
            self._drop_oldest()
        self.graphs.move_to_end(key)
        return entry[0](features, feature_mask)


#: the process's graphs (generate's); ``GRAPHS.enabled = False`` turns them off everywhere
GRAPHS = GraphCache()
