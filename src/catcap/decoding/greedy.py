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
from catcap.decoding.processors import Processor, apply_processors, check_some_allowed, force_token

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
                processors: Iterable[Processor], temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """logits (R, V) -> model log-probs (R, V) and the processed scores to choose from:
    rules applied, ``<eos>`` forced at ``max_len``, ``<pad>`` forced on finished rows."""
    log_probs = logits.float().log_softmax(dim=-1)
    scores = log_probs if temperature == 1.0 else (logits.float() / temperature).log_softmax(dim=-1)
    scores = apply_processors(processors, scores, history, step)
    if step == max_len:
        scores = force_token(scores, ~finished, model.eos_id, 0.0)
    scores = force_token(scores, finished, model.pad_id, 0.0)
    check_some_allowed(scores, step)
    return log_probs, scores


def argmax(scores: Tensor) -> Tensor:
    """Greedy's pick: the best token of every row."""
    return scores.argmax(dim=-1)


class RowSearch:
    """``group`` rows per image, each extended by ``pick``'s token at every step (greedy:
    :func:`argmax`, G = 1; sampling: a draw, G = n samples). Rows are never reordered."""

    def __init__(self, model, images: int, group: int, max_len: int, processors: tuple, pick: Pick,
                 temperature: float, device):
        self.model, self.group, self.max_len = model, group, max_len
        self.processors, self.pick, self.temperature = processors, pick, temperature
        rows = images * group
        self.first_tokens = torch.full((rows,), model.bos_id, dtype=torch.long, device=device)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)  # finished rows
        self.history = self.first_tokens.new_empty(rows, 0)
        self.chosen_log_probs: list[Tensor] = []
        self.masks: list[Tensor] = []

    def widen(self, logits: Tensor, state, record: StepRecord | None):
        """The first step already runs ``group`` rows per image: nothing to copy."""
        return logits, state

    def advance(self, logits: Tensor, step: int) -> tuple[Tensor, None]:
        """One step: the next token of every row (finished rows: ``<pad>``); rows stay in place."""
        finished = self.done
        log_probs, scores = step_scores(self.model, logits, self.history, finished, step, self.max_len,
                                        self.processors, self.temperature)
        tokens = self.pick(scores)
        self.chosen_log_probs.append(log_probs.gather(1, tokens[:, None])[:, 0].masked_fill(finished, 0.0))
        self.masks.append(~finished)
        self.history = torch.cat([self.history, tokens[:, None]], dim=1)
        self.done = finished | (tokens == self.model.eos_id)
        return tokens, None

    def output(self, record: StepRecord | None) -> GenerationOutput:
        out = rows_output(self.history, torch.stack(self.chosen_log_probs, 1), torch.stack(self.masks, 1), self.group)
        if record is not None:
            rows = torch.arange(out.tokens.shape[0], device=out.tokens.device)
            for name, value in record.follow(rows, out.lengths, out.mask).items():
                setattr(out, name, value)
        return out


def rows_output(tokens: Tensor, token_log_probs: Tensor, mask: Tensor, group: int) -> GenerationOutput:
    """Assemble a :class:`GenerationOutput` from (R, T) tokens, log-probs and mask."""
    total = token_log_probs.sum(dim=1)
    return GenerationOutput(tokens, total, mask.sum(dim=1), token_log_probs, mask, total, group)
