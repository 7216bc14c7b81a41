"""Batched beam search over the cached decoding protocol.

All B images advance together: the state holds K = ``beam_size`` hypotheses per image
(``init_state(..., group=K)``, row ``b * K + k``), and every step is a handful of tensor ops
over the B * K rows, so the Python work per step does not grow with B.

One step (the standard fairseq / Hugging Face scheme):

1. candidate score = beam sum + log p(token), processors applied, ``<eos>`` forced at
   ``max_len``; take the 2K best candidates of each image (over K beams x V tokens);
2. ``<eos>`` candidates ranked among the first K go to the image's pool of finished
   hypotheses, scored ``sum log p / length ** length_penalty`` (length = words + ``<eos>``;
   0 = raw sum; Hugging Face style, not GNMT's ((5 + len) / 6) ** alpha); the pool keeps the best K;
3. the K best non-``<eos>`` candidates become the open beams
   (``state.reorder(image * K + source beam)``);
4. an image is done when its pool is full and no open beam can beat the pool's worst score:
   log-probs are <= 0, so an open beam's best possible final score is its current sum divided
   by the most favourable remaining length; it is done too when no open beam can go on (the
   rules left none: it keeps the captions it has; with none at all that is an error); the
   search stops when every image is done or at ``max_len``, where all open beams are closed
   with ``<eos>``.

At step 0 all K beams of an image are identical, so the model runs that step once per image
and its output and state are then copied to the K beams (``state.reorder(..., group=K)``);
only beam 0 is expanded (the others start at -inf), so no duplicates appear. Legend: B images,
K beams, V vocab, L = max_len + 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch
from torch import Tensor

from catcap.decoding.greedy import check_inputs
from catcap.decoding.processors import NEG_INF, DecodeOutput, MaskingProcessor, Processor, apply_processors


def penalised(sums: Tensor, length: int, alpha: float) -> Tensor:
    """Hugging Face-style length normalisation ``sums / length ** alpha`` (alpha = 0: raw sum)."""
    return sums if alpha == 0 else sums / float(length) ** alpha


def best_possible(sums: Tensor, step: int, max_len: int, alpha: float) -> Tensor:
    """Upper bound on the final score of open beams with ``sums`` (<= 0) after ``step + 1``
    tokens: the next token is the earliest ``<eos>`` (length step + 2), the latest is at L."""
    if alpha == 0:
        return sums
    length = max_len + 1 if alpha > 0 else step + 2
    return penalised(sums, length, alpha)


@dataclass
class Pool:
    """Finished hypotheses, K per image, best first: scores/sums/lengths (B, K),
    tokens (B, K, L) padded, token_log_probs (B, K, L)."""

    scores: Tensor
    sums: Tensor
    lengths: Tensor
    tokens: Tensor
    token_log_probs: Tensor

    @classmethod
    def empty(cls, images: int, beams: int, width: int, pad_id: int, device) -> "Pool":
        scores = torch.full((images, beams), NEG_INF, device=device)
        tokens = torch.full((images, beams, width), pad_id, dtype=torch.long, device=device)
        return cls(scores, scores.clone(), torch.zeros(images, beams, dtype=torch.long, device=device),
                   tokens, torch.zeros(images, beams, width, device=device))

    def merged(self, new: "Pool") -> "Pool":
        """The best K of the pool and ``new`` (B, K') entries; on equal scores the pool wins."""
        keep = self.scores.shape[1]
        scores = torch.cat([self.scores, new.scores], dim=1)
        order = scores.sort(dim=1, descending=True, stable=True).indices[:, :keep]

        def pick(a: Tensor, b: Tensor) -> Tensor:
            both = torch.cat([a, b], dim=1)
            index = order.view(*order.shape, *([1] * (both.dim() - 2))).expand(-1, -1, *both.shape[2:])
            return both.gather(1, index)

        return Pool(*(pick(getattr(self, f), getattr(new, f)) for f in
                      ("scores", "sums", "lengths", "tokens", "token_log_probs")))

    def done(self, open_sums: Tensor, step: int, max_len: int, alpha: float) -> Tensor:
        """(B,) True where the pool is full and no open beam (sums (B, K)) can beat its worst."""
        worst = self.scores[:, -1]
        bound = best_possible(open_sums.max(dim=1).values, step, max_len, alpha)
        return torch.isfinite(worst) & (bound <= worst)


@torch.no_grad()
def beam_search(model, features: Tensor, feature_mask: Tensor, beam_size: int = 5, max_len: int = 16,
                length_penalty: float = 0.0, processors: Iterable[Processor] = (),
                num_return: int = 1) -> DecodeOutput:
    """features (B, N, F), mask (B, N) -> the ``num_return`` best finished hypotheses per image,
    ranked by final score, rows image-major: tokens (B*num_return, T), model log-prob sums,
    length-penalised ``scores``, lengths (words + ``<eos>``), token_log_probs, mask."""
    check_inputs(features, feature_mask, max_len)
    if beam_size < 1 or not 1 <= num_return <= beam_size:
        raise ValueError(f"need beam_size >= 1 and 1 <= num_return <= beam_size, got {beam_size}, {num_return}")
    processors, k, b = tuple(processors), beam_size, features.shape[0]
    memory, memory_mask = model.encode(features, feature_mask)
    state = model.init_state(memory, memory_mask, group=1)  # step 0 runs once per image
    device = features.device
    sums = torch.zeros(b, k, device=device)
    sums[:, 1:] = NEG_INF  # step 0: only beam 0 is expanded
    tokens = torch.full((b,), model.bos_id, dtype=torch.long, device=device)
    history, history_lp = tokens.new_empty(b * k, 0), sums.new_empty(b * k, 0)
    pool = Pool.empty(b, k, max_len + 1, model.pad_id, device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    first_row = torch.arange(b, device=device)[:, None] * k
    for step in range(max_len + 1):
        logits, state = model.step(tokens, state)
        if step == 0:  # the K identical beams of an image: copies of its one first step
            beams = torch.arange(b, device=device).repeat_interleave(k)
            logits, state = logits.index_select(0, beams), state.reorder(beams, group=k)
        log_probs = logits.float().log_softmax(dim=-1)
        totals = _totals(sums, log_probs, processors, history, step, step == max_len, model.eos_id)
        cand_sums, source, cand_tokens = _candidates(totals, b)  # (B, 2K) each
        rows = first_row + source  # (B, 2K) source rows
        cand_lp = log_probs.view(b, -1).gather(1, source * log_probs.shape[1] + cand_tokens)
        pool = pool.merged(_finished(cand_sums, cand_tokens, cand_lp, rows, history, history_lp,
                                     done, step, max_len, length_penalty, model))
        exhausted = torch.isneginf(cand_sums[:, 0]) & ~done  # no open beam of the image can go on
        _check_candidates(exhausted, pool, step)
        keep = _open_beams(cand_tokens == model.eos_id, k)
        sums, rows = cand_sums.gather(1, keep), rows.gather(1, keep).view(-1)
        tokens = cand_tokens.gather(1, keep).view(-1)
        history = torch.cat([history[rows], tokens[:, None]], dim=1)
        history_lp = torch.cat([history_lp[rows], cand_lp.gather(1, keep).view(-1, 1)], dim=1)
        done = done | exhausted | pool.done(sums, step, max_len, length_penalty)
        if step == max_len or bool(done.all()):
            break
        state = state.reorder(rows)
    return _output(pool, num_return)


def _totals(sums: Tensor, log_probs: Tensor, processors: tuple, history: Tensor, step: int, last: bool,
            eos_id: int) -> Tensor:
    """Every continuation's summed score (B*K, V): beam sum + processed log-prob, only ``<eos>``
    at the last step. catcap's rules (:class:`MaskingProcessor`) mask the sums in place, which
    gives exactly the sums of the masked log-probs (-inf + s = -inf) without a copy of the
    (B*K, V) log-probs per rule; any other processor runs on the log-probs first."""
    rows = sums.view(-1, 1)
    if last:  # only <eos>, with its model log-prob, whatever the rules said
        totals = torch.full_like(log_probs, NEG_INF)
        totals[:, eos_id] = rows[:, 0] + log_probs[:, eos_id]
        return totals
    if all(isinstance(p, MaskingProcessor) for p in processors):
        totals = rows + log_probs
        for processor in processors:
            processor.mask(totals, history, step)
        return totals
    return rows + apply_processors(processors, log_probs, history, step)


def _candidates(totals: Tensor, images: int) -> tuple[Tensor, Tensor, Tensor]:
    """Summed scores (B*K, V) -> the 2K best continuations of each image, best first: their sums
    (B, 2K), source beams and tokens (B, 2K): one top-k over all K x V sums. (Two top-k's, each
    beam's 2K best tokens first, pick the same candidates without writing the (B*K, V) sums, but
    measured no faster: two_topk in benchmarks/results/decode.md.)"""
    k, vocab = totals.shape[0] // images, totals.shape[1]
    cand_sums, cand = totals.view(images, -1).topk(2 * k, dim=1)
    return cand_sums, torch.div(cand, vocab, rounding_mode="floor"), cand % vocab


def _check_candidates(exhausted: Tensor, pool: Pool, step: int) -> None:
    """An image whose beams cannot go on is finished with the captions it has; with none, the
    rules left it no caption at all: an error."""
    if bool((exhausted & torch.isneginf(pool.scores[:, 0])).any()):
        raise ValueError(f"at step {step} the logit processors forbid every continuation of every beam "
                         "of some image; relax the rules (min_len, suppressed ids, n-gram blocking)")


def _open_beams(is_eos: Tensor, k: int) -> Tensor:
    """(B, 2K) candidates, best first -> (B, K) positions of the K best non-``<eos>`` ones."""
    width = is_eos.shape[1]
    key = is_eos.long() * width + torch.arange(width, device=is_eos.device)
    return key.argsort(dim=1)[:, :k]


def _finished(cand_sums, cand_tokens, cand_lp, rows, history, history_lp, done, step, max_len, alpha, model) -> Pool:
    """The ``<eos>`` candidates among each image's first K as a (B, K) :class:`Pool` to merge."""
    b, k = done.shape[0], cand_sums.shape[1] // 2
    sums, rows, lp = cand_sums[:, :k], rows[:, :k].reshape(-1), cand_lp[:, :k]
    ok = (cand_tokens[:, :k] == model.eos_id) & torch.isfinite(sums) & ~done[:, None]
    width, length = max_len + 1, step + 1
    tokens = torch.full((b * k, width), model.pad_id, dtype=torch.long, device=sums.device)
    tokens[:, :step] = history[rows]
    tokens[:, step] = model.eos_id
    token_lp = sums.new_zeros(b * k, width)
    token_lp[:, :step] = history_lp[rows]
    token_lp[:, step] = lp.reshape(-1)
    scores = penalised(sums, length, alpha).masked_fill(~ok, NEG_INF)
    lengths = torch.full_like(rows, length).view(b, k)
    return Pool(scores, sums.masked_fill(~ok, NEG_INF), lengths, tokens.view(b, k, width), token_lp.view(b, k, width))


def _output(pool: Pool, num_return: int) -> DecodeOutput:
    """The best ``num_return`` of every pool as image-major rows, trimmed to the longest."""
    b = pool.scores.shape[0]
    found = torch.isfinite(pool.scores).sum(dim=1)
    if bool((found < num_return).any()):
        raise ValueError(f"the logit processors allow only {int(found.min())} caption(s) for some image, fewer than "
                         f"num_return={num_return}; relax the rules or ask for fewer")
    lengths = pool.lengths[:, :num_return].reshape(-1)
    width = max(int(lengths.max()), 1)
    tokens = pool.tokens[:, :num_return, :width].reshape(b * num_return, width)
    token_lp = pool.token_log_probs[:, :num_return, :width].reshape(b * num_return, width)
    mask = torch.arange(width, device=tokens.device)[None, :] < lengths[:, None]
    return DecodeOutput(tokens, pool.sums[:, :num_return].reshape(-1), lengths, token_lp, mask,
                        pool.scores[:, :num_return].reshape(-1), num_return)
