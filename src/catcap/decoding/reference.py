"""Uncached reference decoding: the oracle the cached loops are tested against.

Nothing here uses ``init_state`` / ``step``: every next-token distribution comes from the full
teacher-forced ``model(features, feature_mask, captions, caption_mask)`` on the prefixes, and
the beam search is a plain per-image Python loop over candidate lists. It is slow on purpose
(quadratic in length, one image at a time) and is used only by tests.

It shares no decoding code with what it checks: the length penalty and the decoding rules
(``min_len``, ``no_repeat_ngram``, ``suppress_ids``, ``bad_ending_ids``, ``suppress_eos``, the
same keywords as :func:`catcap.decoding.build_processors`) are written again here, as plain
Python over one hypothesis's token list (:func:`forbidden_tokens`).
Legend: B images, K beams, V vocab, T steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor

from catcap.decoding.output import GenerationOutput


def next_log_probs(model, features: Tensor, feature_mask: Tensor, prefixes: Tensor) -> Tensor:
    """features (R, N, F), mask (R, N), prefixes (R, t) generated tokens -> (R, V) model
    log-probs of the next token, from a full teacher-forced forward over ``<bos> prefix``."""
    rows = prefixes.shape[0]
    bos = torch.full((rows, 1), model.bos_id, dtype=torch.long, device=prefixes.device)
    slot = torch.full((rows, 1), model.pad_id, dtype=torch.long, device=prefixes.device)  # read-off slot, not read
    captions = torch.cat([bos, prefixes, slot], dim=1)
    logits, _ = model(features, feature_mask, captions, torch.ones_like(captions, dtype=torch.bool))
    return logits[:, -1].float().log_softmax(dim=-1)


def teacher_forced_log_probs(model, features: Tensor, feature_mask: Tensor, tokens: Tensor,
                             mask: Tensor, group: int = 1) -> Tensor:
    """Per-token model log-probs (R, T) of generated ``tokens`` (R, T) (mask True = generated)
    by one teacher-forced forward; rows image-major with ``group`` rows per image; 0 where masked."""
    features = features.repeat_interleave(group, dim=0)
    feature_mask = feature_mask.repeat_interleave(group, dim=0)
    bos = torch.full_like(tokens[:, :1], model.bos_id)
    captions = torch.cat([bos, tokens], dim=1)
    caption_mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)
    logits, _ = model(features, feature_mask, captions, caption_mask)
    chosen = logits.float().log_softmax(dim=-1).gather(2, tokens[:, :, None])[:, :, 0]
    return chosen.masked_fill(~mask, 0.0)


@dataclass
class Hypothesis:
    tokens: list[int] = field(default_factory=list)
    log_probs: list[Tensor] = field(default_factory=list)  # 0-dim float32 per token
    total: Tensor = field(default_factory=lambda: torch.zeros(()))  # float32 running sum
    score: Tensor | None = None  # final (penalised) score once finished


def forbidden_tokens(tokens: list[int], eos_id: int, min_len: int = 0, no_repeat_ngram: int = 0,
                     suppress_ids: Iterable[int] = (), bad_ending_ids: Iterable[int] = (),
                     suppress_eos: bool = False) -> set[int]:
    """The tokens the rules forbid after the words ``tokens`` of one hypothesis."""
    forbidden = set(suppress_ids)
    if len(tokens) < min_len or suppress_eos or (tokens and tokens[-1] in set(bad_ending_ids)):
        forbidden.add(eos_id)
    n = no_repeat_ngram
    if n > 0:
        seen = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
        last = tuple(tokens[len(tokens) - n + 1:]) if n > 1 else ()
        forbidden |= {gram[-1] for gram in seen if gram[:-1] == last}
    return forbidden


def length_penalised(total: Tensor, length: int, alpha: float) -> Tensor:
    """A finished hypothesis's score: its log-prob sum over ``length ** alpha`` (length = words +
    ``<eos>``; alpha 0 leaves the sum as it is)."""
    return total / float(length) ** alpha


@torch.no_grad()
def reference_beam_search(model, features: Tensor, feature_mask: Tensor, beam_size: int = 5,
                          max_len: int = 16, length_penalty: float = 0.0, rules: dict | None = None,
                          num_return: int = 1) -> GenerationOutput:
    """Same contract and result as :func:`catcap.decoding.beam_search` with
    ``processors=build_processors(eos_id, **rules)``, one image at a time. It never stops
    early: it runs until ``max_len`` closes every beam, which also checks that the cached
    search's early stop never changes the answer."""
    outputs = []
    for b in range(features.shape[0]):
        pool = _search_image(model, features[b:b + 1], feature_mask[b:b + 1], beam_size, max_len,
                             length_penalty, dict(rules or {}))
        outputs.extend(pool[:num_return])
    return _as_output(outputs, model.pad_id, num_return)


def _search_image(model, features, feature_mask, k, max_len, alpha, rules) -> list[Hypothesis]:
    beams, pool = [Hypothesis()], []
    for step in range(max_len + 1):
        prefixes = torch.tensor([h.tokens for h in beams], dtype=torch.long, device=features.device)
        rows = len(beams)
        log_probs = next_log_probs(model, features.expand(rows, -1, -1), feature_mask.expand(rows, -1),
                                   prefixes.view(rows, step)).cpu()  # the bookkeeping below runs on the CPU
        candidates = []  # (sum, beam, token), enumerated beam-major like the batched search
        for i, hyp in enumerate(beams):
            totals = hyp.total + log_probs[i]  # float32, the same sums the batched search forms
            if step == max_len:  # only <eos>, with the model's own probability, whatever the rules say
                allowed = [model.eos_id]
            else:
                forbidden = forbidden_tokens(hyp.tokens, model.eos_id, **rules)
                allowed = [v for v in range(len(totals)) if v not in forbidden]
            candidates += [(totals[v], i, v) for v in allowed if float(totals[v]) != float("-inf")]
        if not candidates and not pool:
            raise ValueError(f"at step {step} the rules forbid every continuation of every beam")
        if not candidates:  # no beam can go on: the captions found so far are the answer
            break
        candidates = sorted(candidates, key=lambda c: -float(c[0]))[:2 * k]
        beams = _advance(beams, pool, candidates, log_probs, step, alpha, k, model.eos_id)
        pool = sorted(pool, key=lambda h: -float(h.score))[:k]
        if not beams:
            break
    return pool


def _advance(beams, pool, candidates, log_probs, step, alpha, k, eos_id) -> list[Hypothesis]:
    """Move ``<eos>`` candidates ranked < K to ``pool``; return the K best other ones."""
    survivors = []
    for rank, (total, i, v) in enumerate(candidates):
        hyp = beams[i]
        new = Hypothesis(hyp.tokens + [v], hyp.log_probs + [log_probs[i, v]], total)
        if v == eos_id:
            if rank < k:
                new.score = length_penalised(total, step + 1, alpha)
                pool.append(new)
        elif len(survivors) < k:
            survivors.append(new)
    return survivors


def _as_output(hyps: list[Hypothesis], pad_id: int, group: int) -> GenerationOutput:
    width = max(len(h.tokens) for h in hyps)
    tokens = torch.full((len(hyps), width), pad_id, dtype=torch.long)
    token_lp = torch.zeros(len(hyps), width)
    for r, h in enumerate(hyps):
        tokens[r, :len(h.tokens)] = torch.tensor(h.tokens, dtype=torch.long)
        token_lp[r, :len(h.tokens)] = torch.stack(h.log_probs) if h.log_probs else token_lp[r, :0]
    lengths = torch.tensor([len(h.tokens) for h in hyps])
    mask = torch.arange(width)[None, :] < lengths[:, None]
    sums = torch.stack([h.total for h in hyps])
    scores = torch.stack([h.score for h in hyps])
    return GenerationOutput(tokens, sums, lengths, token_lp, mask, scores, group)
