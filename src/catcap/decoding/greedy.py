"""Greedy decoding, and the one-token-per-row loop it shares with sampling.

Every row is fed ``<bos>`` first and then its previous token. At step ``t`` (the index of the
token being chosen, 0-based) the model log-probabilities go through the logit processors;
at ``t = max_len`` only ``<eos>`` is allowed, so a caption has at most ``max_len`` words plus
its ``<eos>``. Rows that have emitted ``<eos>`` keep emitting ``<pad>`` (log-prob 0) until
every row is finished. Legend: B images, G rows per image, R = B * G, V vocab, T steps.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor

from catcap.decoding.processors import DecodeOutput, Processor, apply_processors, check_some_allowed, force_token

Pick = Callable[[Tensor], Tensor]  # processed scores (R, V) -> chosen tokens (R,)


def check_inputs(features: Tensor, feature_mask: Tensor, max_len: int) -> None:
    """Validate up front: (B, N, F) features, (B, N) bool mask, max_len >= 1."""
    if features.dim() != 3:
        raise ValueError(f"features must be (B, N, F), got shape {tuple(features.shape)}")
    if feature_mask.shape != features.shape[:2] or feature_mask.dtype != torch.bool:
        raise ValueError(f"feature_mask must be a bool (B, N) = {tuple(features.shape[:2])} tensor, "
                         f"got {feature_mask.dtype} {tuple(feature_mask.shape)}")
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1 word, got {max_len}")


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


def decode_rows(model, features: Tensor, feature_mask: Tensor, group: int, max_len: int,
                processors: Iterable[Processor], pick: Pick, temperature: float = 1.0) -> DecodeOutput:
    """Run ``group`` rows per image to ``<eos>``, choosing each token with ``pick``."""
    check_inputs(features, feature_mask, max_len)
    processors = tuple(processors)
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, group=group)
    rows = features.shape[0] * group
    tokens = torch.full((rows,), model.bos_id, dtype=torch.long, device=features.device)
    finished = torch.zeros(rows, dtype=torch.bool, device=features.device)
    history = tokens.new_empty(rows, 0)
    chosen_log_probs, masks = [], []
    for step in range(max_len + 1):
        logits, state = model.step(tokens, state)
        log_probs, scores = step_scores(model, logits, history, finished, step, max_len, processors, temperature)
        tokens = pick(scores)
        chosen_log_probs.append(log_probs.gather(1, tokens[:, None])[:, 0].masked_fill(finished, 0.0))
        masks.append(~finished)
        history = torch.cat([history, tokens[:, None]], dim=1)
        finished = finished | (tokens == model.eos_id)
        if bool(finished.all()):
            break
    return rows_output(history, torch.stack(chosen_log_probs, 1), torch.stack(masks, 1), group)


def rows_output(tokens: Tensor, token_log_probs: Tensor, mask: Tensor, group: int) -> DecodeOutput:
    """Assemble a :class:`DecodeOutput` from (R, T) tokens, log-probs and mask."""
    total = token_log_probs.sum(dim=1)
    return DecodeOutput(tokens, total, mask.sum(dim=1), token_log_probs, mask, total, group)


@torch.no_grad()
def greedy(model, features: Tensor, feature_mask: Tensor, max_len: int = 16,
           processors: Iterable[Processor] = ()) -> DecodeOutput:
    """The most likely next token at every step: features (B, N, F), mask (B, N) ->
    tokens (B, T), summed log-probs (B,), lengths (B,) (words + ``<eos>``)."""
    return decode_rows(model, features, feature_mask, 1, max_len, processors, _argmax)


def _argmax(scores: Tensor) -> Tensor:
    return scores.argmax(dim=-1)

