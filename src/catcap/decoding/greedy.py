"""Greedy decoding and sampling: the strategy that chooses one token per row and step.

Every row is fed ``<bos>`` first and then its previous token. At step ``t`` (the index of the
token being chosen, 0-based) the model log-probabilities go through the logit processors;
at ``t = max_len`` only ``<eos>`` is allowed, so a caption has at most ``max_len`` words plus
its ``<eos>``. Rows that have emitted ``<eos>`` keep emitting ``<pad>`` (log-prob 0) until
every row is finished. Greedy takes the best token (``pick = argmax``), sampling draws one
(:mod:`catcap.decoding.sampling`). Legend: B images, G rows per image, R = B * G, V vocab, T steps.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor

from catcap.decoding.output import GenerationOutput, StepRecord
from catcap.decoding.processors import (Processor, StepCheck, apply_processors, force_token, nothing_allowed,
                                        nothing_allowed_message)

Pick = Callable[[Tensor], Tensor]  # processed scores (R, V) -> chosen tokens (R,)


def check_inputs(features: Tensor, feature_mask: Tensor) -> int:
    """Validate up front: (B, N, F) features and a (B, N) bool mask; returns B."""
    if features.dim() != 3:
        raise ValueError(f"features must be (B, N, F), got shape {tuple(features.shape)}")
    if feature_mask.shape != features.shape[:2] or feature_mask.dtype != torch.bool:
        raise ValueError(f"feature_mask must be a bool (B, N) = {tuple(features.shape[:2])} tensor, "
                         f"got {feature_mask.dtype} {tuple(feature_mask.shape)}")
    return features.shape[0]


def step_scores(model, logits: Tensor, history: Tensor, finished: Tensor, step: int, max_len: int,
                processors: Iterable[Processor], temperature: float = 1.0,
                static: bool = False) -> tuple[Tensor, Tensor]:
    """logits (R, V) -> model log-probs (R, V) and the processed scores to choose from:
    rules applied, ``<eos>`` forced at ``max_len``, ``<pad>`` forced on finished rows
    (``static``: without reading back whether any row is finished)."""
    log_probs = logits.float().log_softmax(dim=-1)
    scores = log_probs if temperature == 1.0 else (logits.float() / temperature).log_softmax(dim=-1)
    scores = apply_processors(processors, scores, history, step)
    if step == max_len:
        scores = force_token(scores, ~finished, model.eos_id, 0.0, static)
    return log_probs, force_token(scores, finished, model.pad_id, 0.0, static)


def argmax(scores: Tensor) -> Tensor:
    """Greedy's pick: the best token of every row."""
    return scores.argmax(dim=-1)


class RowSearch:
    """``group`` rows per image, each extended by ``pick``'s token at every step (greedy:
    :func:`argmax`, G = 1; sampling: a draw, G = n samples). Rows are never reordered. Tokens,
    their log-probs and the mask live in (R, max_len + 1) buffers allocated once and written
    one column per step; ``static``: no host read per step (errors are raised after the loop)."""

    def __init__(self, model, images: int, group: int, max_len: int, processors: tuple, pick: Pick,
                 temperature: float, device, static: bool = False):
        self.model, self.group, self.max_len = model, group, max_len
        self.processors, self.pick, self.temperature, self.static = processors, pick, temperature, static
        rows = images * group
        self.first_tokens = torch.full((rows,), model.bos_id, dtype=torch.long, device=device)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)  # finished rows
        self.tokens = torch.full((rows, max_len + 1), model.pad_id, dtype=torch.long, device=device)
        self.chosen_log_probs = torch.zeros(rows, max_len + 1, device=device)
        self.masks = torch.zeros(rows, max_len + 1, dtype=torch.bool, device=device)
        self.steps = 0  # columns written
        self.check = StepCheck(nothing_allowed_message, static, device)

    @property
    def history(self) -> Tensor:
        """(R, t) the tokens chosen so far."""
        return self.tokens[:, :self.steps]

    def widen(self, logits: Tensor, state, record: StepRecord | None):
        """The first step already runs ``group`` rows per image: nothing to copy."""
        return logits, state

    def advance(self, logits: Tensor, step: int) -> tuple[Tensor, None]:
        """One step: the next token of every row (finished rows: ``<pad>``); rows stay in place."""
        finished = self.done
        log_probs, scores = step_scores(self.model, logits, self.history, finished, step, self.max_len,
                                        self.processors, self.temperature, self.static)
        self.check(nothing_allowed(scores), step)
        tokens = self.pick(scores)
        self.chosen_log_probs[:, step] = log_probs.gather(1, tokens[:, None])[:, 0].masked_fill(finished, 0.0)
        self.masks[:, step] = ~finished
        self.tokens[:, step] = tokens
        self.steps = step + 1
        self.done = finished | (tokens == self.model.eos_id)
        return tokens, None

    def output(self, record: StepRecord | None) -> GenerationOutput:
        """The rows' captions, as wide as the steps that chose a token for some row (static
        decoding runs every step: the columns after the last ``<eos>`` are cut here)."""
        self.check.raise_if_failed()
        width = int(self.masks.sum(dim=1).max()) if self.static else self.steps
        out = rows_output(*(x[:, :width].contiguous() for x in (self.tokens, self.chosen_log_probs, self.masks)),
                          self.group)
        if record is not None:
            rows = torch.arange(out.tokens.shape[0], device=out.tokens.device)
            for name, value in record.follow(rows, out.lengths, out.mask).items():
                setattr(out, name, value)
        return out


def rows_output(tokens: Tensor, token_log_probs: Tensor, mask: Tensor, group: int) -> GenerationOutput:
    """Assemble a :class:`GenerationOutput` from (R, T) tokens, log-probs and mask."""
    total = token_log_probs.sum(dim=1)
    return GenerationOutput(tokens, total, mask.sum(dim=1), token_log_probs, mask, total, group)
