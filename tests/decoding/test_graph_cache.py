"""The CUDA graph cache's bookkeeping, on a CPU: keys, the bound, least-recently-used eviction,
the reasons to decode eagerly, a failed capture's fallback, and the ``--no-cuda-graphs`` flag.
A capture here is a stand-in that decodes eagerly (no CUDA); the captures themselves are
tested in tests/gpu/test_graphs.py."""

import argparse
import importlib
import warnings

import pytest
import torch

from catcap.decoding import GenerationConfig, generate
from catcap.decoding.generate import decode, strategy
from catcap.decoding.graphs import GRAPHS, GraphCache, cloned, tensors_in
from catcap.decoding.processors import build_processors, generation_rules
from tiny_models import contract_batch, tiny_captioner

generate_module = importlib.import_module("catcap.decoding.generate")  # the module (the package exports the function)

GREEDY = GenerationConfig(num_beams=1, max_length=5)


class Stand_in:
    """A capture that records what it was asked for and replays by running the static loop
    it was given, eagerly."""

    def __init__(self):
        self.asked = []

    def __call__(self, features, feature_mask, make_search, run):
        self.asked.append(tuple(features.shape))

        def replay(f, m):
            search = make_search(m)
            run(f, m, search)
            return search.output(None)
        return replay


def inputs(images=3):
    features, fmask, _, _ = contract_batch()
    return features[:images], fmask[:images]


@pytest.fixture
def model():
    return tiny_captioner("transformer", "caca")


def ask(cache, model, images=3, config=GREEDY):
    features, fmask = inputs(images)
    rules = generation_rules(config, model.eos_id)  # new rule objects every call, as generate makes them
    with torch.no_grad():
        return cache.generate(model, features, fmask, config, rules, None,
                              lambda mask: strategy(model, config, rules, images, mask, None, True),
                              lambda f, mask, search: decode(model, f, mask, config.max_length, search, None, True))


def test_one_capture_per_key_and_a_replay_after(model):
    capture = Stand_in()
    cache = GraphCache(capture=capture)
    first, again = ask(cache, model), ask(cache, model)
    assert cache.captures == 1 and capture.asked == [(3, 5, 12)]
    features, fmask = inputs()
    with torch.no_grad():
        eager = generate(model, features, fmask, GREEDY)
    assert torch.equal(first.tokens, eager.tokens) and torch.equal(again.tokens, eager.tokens)
    ask(cache, model, images=2)  # another batch shape: another graph
    ask(cache, model, config=GenerationConfig(num_beams=2, max_length=5))  # another config: another graph
    assert cache.captures == 3 and len(cache.graphs) == 3


def test_the_cache_is_bounded_and_drops_the_least_recently_used(model):
    cache = GraphCache(max_graphs=2, capture=Stand_in())
    ask(cache, model, images=3)
    ask(cache, model, images=2)
    ask(cache, model, images=3)  # 3 used after 2: 2 is now the least recently used
    ask(cache, model, images=1)
    assert [key[2][0] for key in cache.graphs] == [3, 1]
    with pytest.warns(RuntimeWarning, match="captured anew.*raise catcap.decoding.graphs.GRAPHS.max_graphs"):
        ask(cache, model, images=2)  # dropped, so captured again: the cache is too small, and it says so
    assert cache.captures == 4 and cache.recaptures == 1 and len(cache.graphs) == 2


def test_keys_in_rotation_beyond_the_bound_are_recaptured_every_call(model):
    cache = GraphCache(max_graphs=2, capture=Stand_in())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            for images in (1, 2, 3):
                ask(cache, model, images=images)
    assert cache.captures == 9 and cache.recaptures == 6
    assert sum("captured anew" in str(w.message) for w in seen) == 1  # said once
    big = GraphCache(max_graphs=3, capture=Stand_in())
    for _ in range(3):
        for images in (1, 2, 3):
            ask(big, model, images=images)
    assert big.captures == 3 and big.recaptures == 0


def test_new_parameter_tensors_need_a_new_capture_but_in_place_updates_do_not(model):
    cache = GraphCache(capture=Stand_in())
    ask(cache, model)
    with torch.no_grad():
        model.decoder.output.bias.add_(0.1)  # in place, as an optimizer step: the graph reads it
    ask(cache, model)
    assert cache.captures == 1
    model.decoder.output.bias = torch.nn.Parameter(model.decoder.output.bias.detach().clone())
    ask(cache, model)
    assert cache.captures == 2


def test_reasons_to_decode_eagerly(model):
    cache = GraphCache(capture=Stand_in())
    features, fmask = inputs()
    with torch.no_grad():
        assert cache.why_eager(model, features, GREEDY, None) is None
        assert "seeded" in cache.why_eager(model, features, GenerationConfig(do_sample=True, seed=1), None)
        assert "seeded" in cache.why_eager(model, features, GenerationConfig(do_sample=True), torch.Generator())
        assert "output_attentions" in cache.why_eager(model, features, GenerationConfig(output_attentions=True), None)
        assert "ensemble" in cache.why_eager(model, [features], GREEDY, None)
        cache.enabled = False
        assert "turned off" in cache.why_eager(model, features, GREEDY, None)
        cache.enabled = True
    assert "autograd" in cache.why_eager(model, features, GREEDY, None)  # grad on, parameters that need it
    with torch.no_grad():
        assert ask(cache, model, config=GenerationConfig(output_attentions=True, num_beams=1)) is None
    assert cache.captures == 0


def test_a_failed_capture_falls_back_once_with_a_warning(model):
    calls = []

    def failing(*args):
        calls.append(1)
        raise RuntimeError("operation not permitted when stream is capturing")

    cache = GraphCache(capture=failing)
    with pytest.warns(RuntimeWarning, match="decoding eagerly instead .*not permitted when stream is capturing"):
        assert ask(cache, model) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ask(cache, model) is None  # not tried again, not warned again
    assert len(calls) == 1 and len(cache.refused) == 1 and cache.captures == 0


def test_generate_asks_the_graphs_only_on_cuda_with_static_decoding(model, monkeypatch):
    """On a CPU the cache is never asked; on a (pretended) CUDA device it is, unless
    ``cuda_graphs=False`` or ``static=False``; its answer is what generate returns."""
    asked = []

    def pretend(*args):
        asked.append(1)
        return "from the graph"

    monkeypatch.setattr(GRAPHS, "generate", pretend)
    features, fmask = inputs()
    with torch.no_grad():
        generate(model, features, fmask, GREEDY, static=True)
        assert asked == []
        monkeypatch.setattr(generate_module, "input_device", lambda mask: torch.device("cuda"))
        assert generate(model, features, fmask, GREEDY) == "from the graph"
        assert len(asked) == 1
    monkeypatch.setattr(generate_module, "decode", lambda *args, **kwargs: None)  # no CUDA here: stop before it
    monkeypatch.setattr(generate_module, "strategy", lambda *args: type("S", (), {"output": lambda s, r: "eager"})())
    with torch.no_grad():
        assert generate(model, features, fmask, GREEDY, cuda_graphs=False) == "eager"
        assert generate(model, features, fmask, GREEDY, static=False) == "eager"
    assert len(asked) == 1


@pytest.mark.parametrize("config", [GREEDY, GenerationConfig(num_beams=3, max_length=5)])
def test_the_strategy_tensors_a_graph_reads_are_kept(model, config):
    """The tensors a strategy holds before the loop (what the captured kernels read first) are
    found, so the capture can keep them alive after the loop rebinds the attributes."""
    features, fmask = inputs()
    search = strategy(model, config, build_processors(model.eos_id), 3, fmask, None, True)
    found = {t.data_ptr() for t in tensors_in(search)}
    wanted = [search.first_tokens, search.done, search.check.first]
    wanted += [search.pool.scores, search.sums] if config.num_beams > 1 else [search.tokens, search.masks]
    assert all(t.data_ptr() in found for t in wanted)


def test_outputs_are_copied_out_of_the_graph_memory(model):
    features, fmask = inputs()
    with torch.no_grad():
        out = generate(model, features, fmask, GREEDY)
    copy = cloned(out)
    assert torch.equal(copy.tokens, out.tokens) and copy.tokens.data_ptr() != out.tokens.data_ptr()


@pytest.mark.parametrize("argv, enabled", [([], True), (["--no-cuda-graphs"], False)])
def test_the_no_cuda_graphs_flag(argv, enabled, monkeypatch):
    from catcap.cli.generation_args import add_generation_arguments, generation_config

    monkeypatch.setattr(GRAPHS, "enabled", not enabled)
    parser = argparse.ArgumentParser()
    add_generation_arguments(parser)
    generation_config(parser.parse_args(argv))
    assert GRAPHS.enabled is enabled
