"""Logit processors: decoding rules shared by greedy, sampling and beam search.

A processor is a callable ``(log_probs (R, V), history (R, t), t) -> log_probs`` that sets the
log-probabilities of forbidden tokens to ``-inf`` and leaves every other entry untouched (no
renormalisation, so the score of an allowed token stays its model log-probability). ``history``
holds the tokens generated so far by each row (R rows = hypotheses, ``<bos>`` excluded) and
``t = history.shape[1]`` is the index of the token being chosen. Rules are vectorised over rows.

catcap's own rules are :class:`MaskingProcessor` objects: they forbid by position (history and step),
never by value, so a loop that owns a tensor of scores may apply them in place
(:meth:`MaskingProcessor.mask`) — beam search masks the beams' summed scores directly instead of
copying the (R, V) log-probs once per rule. A processor of any other kind is called as above.

The maximum length is not a processor: the strategies force ``<eos>`` at step ``max_len`` (see
:func:`force_token`). :func:`generation_rules` turns a
:class:`~catcap.decoding.config.GenerationConfig`'s rules into processors.
Legend: R rows, V vocab, T steps.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import torch
from torch import Tensor

Processor = Callable[[Tensor, Tensor, int], Tensor]
NEG_INF = float("-inf")
#: words a caption may not end with under ``remove_bad_endings`` (``<eos>`` forbidden after them)
BAD_ENDINGS = ("a", "an", "the", "of", "with", "on", "in", "and", "to", "at", "for", "its", "his", "her")


def force_token(log_probs: Tensor, rows: Tensor, token: int, value: Tensor | float, static: bool = False) -> Tensor:
    """Allow only ``token`` in the rows where ``rows`` (R,) is True, with log-prob ``value``
    (a float or (R,)), whatever the processors said about it. Returns ``log_probs`` itself when
    no row is forced, else a new tensor; ``static`` (no host read: static decoding) always
    writes the new tensor, whose unforced rows equal ``log_probs``'s."""
    if not static and not bool(rows.any()):
        return log_probs
    if isinstance(value, Tensor):  # a float stays a Python scalar: no host-to-device copy
        value = value.to(log_probs.dtype)
    out = log_probs.masked_fill(rows[:, None], NEG_INF)
    out[:, token] = torch.where(rows, value, log_probs[:, token])
    return out


class DeviceIds:
    """A rule's token ids as a long tensor, copied to a device once and kept: a step then makes
    no host-to-device copy (which a CUDA graph could not capture)."""

    def __init__(self, ids: Sequence[int]):
        self.ids, self._on = list(ids), {}

    def on(self, device) -> Tensor:
        device = torch.device(device)
        if device not in self._on:
            self._on[device] = torch.tensor(self.ids, dtype=torch.long, device=device)
        return self._on[device]


class MaskingProcessor:
    """A rule that only sets tokens to ``-inf``, chosen by history and step, never by score.
    ``mask`` writes that into ``scores`` (R, V) in place; calling the rule returns a masked copy
    (or ``log_probs`` itself when the rule does nothing at this step). A subclass implements
    ``_forbid`` (in place) and, when the rule is idle at some steps, ``applies``."""

    def applies(self, history: Tensor, step: int) -> bool:
        return True

    def mask(self, scores: Tensor, history: Tensor, step: int) -> None:
        """Set the forbidden tokens of ``scores`` (R, V) to ``-inf``, in place."""
        if self.applies(history, step):
            self._forbid(scores, history, step)

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        """:meth:`mask` where the rule applies."""
        raise NotImplementedError

    def __call__(self, log_probs: Tensor, history: Tensor, step: int) -> Tensor:
        if not self.applies(history, step):
            return log_probs
        out = log_probs.clone()
        self._forbid(out, history, step)
        return out


class MinLength(MaskingProcessor):
    """No ``<eos>`` before ``min_len`` words have been generated."""

    def __init__(self, min_len: int, eos_id: int):
        if min_len < 0:
            raise ValueError(f"min_len must be >= 0, got {min_len}")
        self.min_len, self.eos_id = min_len, eos_id

    def applies(self, history: Tensor, step: int) -> bool:
        return step < self.min_len

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        scores[:, self.eos_id] = NEG_INF


class NoRepeatNGram(MaskingProcessor):
    """A token that would complete an n-gram already present in the row's history is forbidden
    (trigram blocking for n = 3)."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError(f"n-gram size must be >= 1, got {n}")
        self.n = n

    def applies(self, history: Tensor, step: int) -> bool:
        return history.shape[1] >= self.n

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        n, t = self.n, history.shape[1]
        grams = history.unfold(1, n, 1)  # (R, t-n+1, n): every n-gram generated so far
        prefix = history[:, t - n + 1:]  # (R, n-1): what the next token would extend
        match = (grams[:, :, :-1] == prefix[:, None, :]).all(dim=2)  # (R, t-n+1)
        hits = torch.zeros_like(scores).scatter_add_(1, grams[:, :, -1], match.to(scores.dtype))
        scores.masked_fill_(hits > 0, NEG_INF)


class SuppressTokens(MaskingProcessor):
    """Tokens that are never generated (e.g. ``<unk>``, ``<pad>``, ``<bos>``)."""

    def __init__(self, ids: Iterable[int]):
        self.ids = sorted(set(int(i) for i in ids))
        self._index = DeviceIds(self.ids)

    def applies(self, history: Tensor, step: int) -> bool:
        return bool(self.ids)

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        scores.index_fill_(1, self._index.on(scores.device), NEG_INF)


class BadEndings(MaskingProcessor):
    """``<eos>`` is forbidden right after a word a caption should not end with
    ("a", "the", "of", "with", ...; the caller passes their ids)."""

    def __init__(self, word_ids: Iterable[int], eos_id: int):
        self.word_ids, self.eos_id = sorted(set(int(i) for i in word_ids)), eos_id
        self._index = DeviceIds(self.word_ids)

    def applies(self, history: Tensor, step: int) -> bool:
        return history.shape[1] > 0 and bool(self.word_ids)

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        after_bad_word = torch.isin(history[:, -1], self._index.on(history.device))
        scores[:, self.eos_id] = scores[:, self.eos_id].masked_fill(after_bad_word, NEG_INF)


class SuppressEos(MaskingProcessor):
    """``<eos>`` is never chosen before ``max_len`` (benchmarks that must run to full length)."""

    def __init__(self, eos_id: int):
        self.eos_id = eos_id

    def _forbid(self, scores: Tensor, history: Tensor, step: int) -> None:
        scores[:, self.eos_id] = NEG_INF


def build_processors(eos_id: int, *, min_len: int = 0, no_repeat_ngram: int = 0,
                     suppress_ids: Sequence[int] = (), bad_ending_ids: Sequence[int] = (),
                     suppress_eos: bool = False) -> tuple[Processor, ...]:
    """Processors from plain arguments; 0 / empty / False turns a rule off."""
    if no_repeat_ngram < 0:
        raise ValueError(f"no_repeat_ngram must be >= 0 (0 = off), got {no_repeat_ngram}")
    if eos_id in set(suppress_ids):
        raise ValueError(f"suppress_ids contains <eos> ({eos_id}); use suppress_eos=True to run to max_len")
    rules: list[Processor] = []
    if suppress_ids:
        rules.append(SuppressTokens(suppress_ids))
    if min_len > 0:
        rules.append(MinLength(min_len, eos_id))
    if no_repeat_ngram > 0:
        rules.append(NoRepeatNGram(no_repeat_ngram))
    if bad_ending_ids:
        rules.append(BadEndings(bad_ending_ids, eos_id))
    if suppress_eos:
        rules.append(SuppressEos(eos_id))
    return tuple(rules)


def caption_processors(vocab, **rules) -> tuple[Processor, ...]:
    """The rules every caption catcap generates follows: ``<pad>``, ``<bos>`` and ``<unk>`` are
    never chosen (plus any :func:`build_processors` ``rules``). ``vocab``: anything with
    ``eos_id``, ``pad_id``, ``bos_id``, ``unk_id``. Validation, ``Captioner.generate`` and
    SCST's sampling all use it, so that a validation score is the score ``catcap evaluate``
    gives and SCST is judged by the captions it learned from (SCST never samples ``<unk>``, so
    nothing keeps its probability down: without this rule in validation, greedy decoding
    after a few SCST epochs emitted runs of ``<unk>``)."""
    return build_processors(vocab.eos_id, suppress_ids=[vocab.pad_id, vocab.bos_id, vocab.unk_id], **rules)


def generation_rules(config, eos_id: int, vocab=None) -> tuple[Processor, ...]:
    """The processors of a :class:`~catcap.decoding.config.GenerationConfig`'s rules
    (``min_length``, ``no_repeat_ngram_size``, ``remove_bad_endings``). With the model's
    ``vocab`` they are :func:`caption_processors` (never ``<pad>``, ``<bos>``, ``<unk>``; bad
    endings looked up by word); without one only the rules that need no words apply."""
    rules = {"min_len": config.min_length, "no_repeat_ngram": config.no_repeat_ngram_size}
    if vocab is None:
        if config.remove_bad_endings:
            raise ValueError("remove_bad_endings looks the words up in the vocabulary: pass vocab= to generate")
        return build_processors(eos_id, **rules)
    if vocab.eos_id != eos_id:
        raise ValueError(f"the vocabulary's <eos> is {vocab.eos_id} but the model's is {eos_id}: use the model's own vocabulary")
    bad = [vocab.id(w) for w in BAD_ENDINGS if w in vocab] if config.remove_bad_endings else []
    return caption_processors(vocab, bad_ending_ids=bad, **rules)


def apply_processors(processors: Iterable[Processor], log_probs: Tensor, history: Tensor, step: int) -> Tensor:
    """Run every processor in order on (R, V) log-probs."""
    for processor in processors:
        log_probs = processor(log_probs, history, step)
    return log_probs


def nothing_allowed(log_probs: Tensor) -> Tensor:
    """() bool: some row has every token forbidden (the rules contradict each other)."""
    return torch.isneginf(log_probs.amax(dim=1)).any()  # one pass, no (R, V) temporary


def nothing_allowed_message(step: int) -> str:
    return (f"at step {step} the logit processors forbid every token of some row; "
            "relax the rules (e.g. min_len, suppressed ids, n-gram blocking on a tiny vocabulary)")


class StepCheck:
    """A per-step condition that is an error, with its message ``message(step)``. Eager
    decoding raises at the step (one host read); ``deferred`` (static decoding, no host read in
    the loop) keeps the first failing step on the device and :meth:`raise_if_failed` raises the
    same error after the loop (the steps after it compute values nobody returns)."""

    def __init__(self, message, deferred: bool, device):
        self.message, self.deferred = message, deferred
        self.first = torch.full((), -1, dtype=torch.long, device=device) if deferred else None

    def __call__(self, failed: Tensor, step: int) -> None:
        """``failed``: () bool, this step's condition."""
        if not self.deferred:
            if bool(failed):
                raise ValueError(self.message(step))
            return
        self.first = torch.where((self.first < 0) & failed, step, self.first)

    def raise_if_failed(self) -> None:
        if self.deferred and int(self.first) >= 0:
            raise ValueError(self.message(int(self.first)))
