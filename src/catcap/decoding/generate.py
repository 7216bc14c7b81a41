"""The one generation loop: greedy decoding, sampling, beam and diverse beam search.

    out = generate(model, features, feature_mask, GenerationConfig(num_beams=3), vocab=vocab)

Every strategy runs the same step function (the loop in :func:`generate`)::

    logits, state = model.step(tokens, state)          # the decoder, one token per row
    tokens, rows = strategy.advance(logits, step)       # scores -> the strategy's choice
    stop when step = max_length or every strategy.done  # the one host read per step (none when static)
    state = state.reorder(rows)                         # beams: rows follow their hypotheses

**Static decoding** (``static=True``; the default on CUDA) is the same loop with no value read
back to the host inside it: it runs all ``max_length + 1`` steps (finished rows keep emitting
``<pad>``, settled beam units take nothing more into their pools, so the captions are the same),
the decoder's memories are allocated once for ``max_length + 1`` entries
(:meth:`~catcap.models.decoders.state.DecoderState.reserved`) and written in place, the
strategy's token and log-prob buffers too, and a rule violation is raised after the loop
(:class:`~catcap.decoding.processors.StepCheck`). The tokens are those of the default path bit
for bit (tests/decoding/test_static.py); on a CPU it is slower when captions end early (it cannot
stop), so the CPU default stays ``static=False``. On CUDA the static loop is what
:mod:`catcap.decoding.graphs` captures as one CUDA graph and replays (``cuda_graphs=False``: eager).

A strategy (:class:`~catcap.decoding.greedy.RowSearch` for greedy and sampling,
:class:`~catcap.decoding.beam.BeamSearch` for beam and diverse beam search) owns the tokens,
scores and finished flags of its hypotheses and assembles the
:class:`~catcap.decoding.output.GenerationOutput`. With ``output_attentions`` /
``output_history_weights`` the step also returns the decoder's per-layer extras, which a
:class:`~catcap.decoding.output.StepRecord` keeps with every reorder, so that each returned
caption gets the attention of its own steps; without them nothing is recorded.

The model is anything with the decoding protocol of
:class:`~catcap.models.caption_model.CaptionModel` (``encode``, ``init_state``, ``step``,
``bos_id``/``eos_id``/``pad_id``; ``step_with_extras`` for the recorded outputs), e.g. an
:class:`~catcap.decoding.ensemble.EnsembleModel`. Generation runs under the caller's grad mode
(sampling's log-probs can be back-propagated; wrap other uses in ``torch.no_grad()``).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from catcap.decoding.beam import BeamSearch
from catcap.decoding.config import GenerationConfig
from catcap.decoding.graphs import GRAPHS
from catcap.decoding.greedy import RowSearch, argmax, check_inputs
from catcap.decoding.output import GenerationOutput, StepRecord
from catcap.decoding.processors import Processor, generation_rules
from catcap.decoding.sampling import sampler


def generate(model, features, feature_mask, config: GenerationConfig, *, vocab=None,
             processors: Iterable[Processor] = (), generator: torch.Generator | None = None,
             static: bool | None = None, cuda_graphs: bool = True) -> GenerationOutput:
    """Captions of B images: features (B, N, F) and mask (B, N), True = real region, decoded as
    ``config`` says. ``vocab``: the model's vocabulary; with it the caption rules apply (never
    ``<pad>``, ``<bos>``, ``<unk>``; ``remove_bad_endings`` by word), without it only the
    config's ``min_length`` and ``no_repeat_ngram_size``. ``processors``: more rules (callables
    ``(log_probs, history, step) -> log_probs``). ``generator``: the random numbers of sampling
    when the config has no ``seed`` (default: torch's global generator). ``static``: static
    decoding (module doc; None = on CUDA only); ``cuda_graphs``: on CUDA, replay the static loop
    as a CUDA graph where one can serve (:mod:`catcap.decoding.graphs`), else run it eagerly."""
    images = model.check_inputs(features, feature_mask) if hasattr(model, "check_inputs") \
        else check_inputs(features, feature_mask)
    rules = generation_rules(config, model.eos_id, vocab) + tuple(processors)
    device = input_device(feature_mask)
    static = device.type == "cuda" if static is None else static
    if static and cuda_graphs and device.type == "cuda":
        out = GRAPHS.generate(model, features, feature_mask, config, rules, generator,
                              lambda mask: strategy(model, config, rules, images, mask, None, True),
                              lambda f, mask, search: decode(model, f, mask, config.max_length, search, None, True))
        if out is not None:
            return out
    search = strategy(model, config, rules, images, feature_mask, generator, static)
    record = StepRecord(config.output_attentions, config.output_history_weights) if config.records_steps else None
    decode(model, features, feature_mask, config.max_length, search, record, static)
    return search.output(record)


def decode(model, features, feature_mask, max_length: int, search, record: StepRecord | None, static: bool) -> None:
    """The loop (module doc): encode, then one model step and one strategy step per token until
    ``max_length`` or, unless ``static``, until every hypothesis is finished."""
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, group=search.group)
    if static:
        state = state.reserved(max_length + 1)
    tokens = search.first_tokens
    for step in range(max_length + 1):
        logits, state = model_step(model, tokens, state, record)
        if step == 0:
            logits, state = search.widen(logits, state, record)
        tokens, rows = search.advance(logits, step)
        if step == max_length or (not static and bool(search.done.all())):
            break
        if rows is not None:
            state = state.reorder(rows)
        if record is not None:
            record.reordered(rows)


def input_device(feature_mask) -> torch.device:
    """The device of the inputs (an ensemble's: its first member's)."""
    return feature_mask[0].device if isinstance(feature_mask, (list, tuple)) else feature_mask.device


def model_step(model, tokens: Tensor, state, record: StepRecord | None):
    """The decoder's step; with a record, its per-layer extras go into it."""
    if record is None:
        return model.step(tokens, state)
    if not hasattr(model, "step_with_extras"):
        raise ValueError(f"output_attentions / output_history_weights need a model that reports its per-step "
                         f"attention (step_with_extras, as CaptionModel); {type(model).__name__} has none")
    logits, state, extras = model.step_with_extras(tokens, state)
    record.add(extras)
    return logits, state


def strategy(model, config: GenerationConfig, rules: tuple, images: int, feature_mask,
             generator: torch.Generator | None = None, static: bool = False):
    """The strategy object ``config`` asks for (greedy, sampling, beam or diverse beam search)."""
    device = input_device(feature_mask)
    if config.num_beams > 1:
        return BeamSearch(model, images, config.num_beams, config.num_beam_groups, config.max_length, rules,
                          config.length_penalty, config.diversity_penalty, config.num_return_sequences, device,
                          record=config.records_steps, static=static)
    if not config.do_sample:
        return RowSearch(model, images, 1, config.max_length, rules, argmax, 1.0, device, static)
    if config.seed is not None:
        if generator is not None:
            raise ValueError("give a seed in the config or a generator, not both")
        generator = torch.Generator(device=device).manual_seed(config.seed)
    return RowSearch(model, images, config.num_return_sequences, config.max_length, rules,
                     sampler(config.top_k, config.top_p, generator), config.temperature, device, static)


# -- shorthands over generate() for the common strategies (tests, benchmarks, training) ---------

def greedy(model, features: Tensor, feature_mask: Tensor, max_len: int = 16,
           processors: Iterable[Processor] = ()) -> GenerationOutput:
    """The most likely next token at every step: features (B, N, F), mask (B, N) ->
    tokens (B, T), summed log-probs (B,), lengths (B,) (words + ``<eos>``). No grad."""
    with torch.no_grad():
        return generate(model, features, feature_mask, GenerationConfig(num_beams=1, max_length=max_len),
                        processors=processors)


def sample(model, features: Tensor, feature_mask: Tensor, num_samples: int = 1, temperature: float = 1.0,
           top_k: int = 0, top_p: float = 1.0, max_len: int = 16, processors: Iterable[Processor] = (),
           generator: torch.Generator | None = None) -> GenerationOutput:
    """``num_samples`` captions per image, rows image-major: tokens (B*n, T), token_log_probs
    (B*n, T) under the unmodified model distribution (:mod:`catcap.decoding.sampling`), their
    sum log_probs (B*n,), mask (B*n, T), lengths (B*n,). Under the caller's grad mode."""
    config = GenerationConfig(do_sample=True, num_return_sequences=num_samples, temperature=temperature,
                              top_k=top_k, top_p=top_p, max_length=max_len)
    return generate(model, features, feature_mask, config, processors=processors, generator=generator)


def beam_search(model, features: Tensor, feature_mask: Tensor, beam_size: int = 5, max_len: int = 16,
                length_penalty: float = 0.0, processors: Iterable[Processor] = (),
                num_return: int = 1) -> GenerationOutput:
    """The ``num_return`` best finished hypotheses of a beam search per image, ranked by final
    score, rows image-major: tokens, model log-prob sums, length-penalised ``scores``, lengths
    (words + ``<eos>``), token_log_probs, mask. No grad."""
    config = GenerationConfig(num_beams=beam_size, max_length=max_len, length_penalty=length_penalty,
                              num_return_sequences=num_return)
    with torch.no_grad():
        return generate(model, features, feature_mask, config, processors=processors)
