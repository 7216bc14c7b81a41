"""Batched beam search, and diverse beam search, over the cached decoding protocol.

All B images advance together: the state holds K = ``num_beams`` hypotheses per image
(``init_state(..., group=K)``, row ``b * K + k``), and every step is a handful of tensor ops
over the B * K rows, so the Python work per step does not grow with B. With G beam groups
(``num_beam_groups``) each image's K beams are G *units* of K' = K / G beams searched side by
side (unit ``b * G + g`` holds rows ``b * K + g * K' ..``); with G = 1 a unit is an image.
Every step below runs over all B * G units at once; only step 1's choice of candidates goes
group by group (:func:`diverse_candidates`).

One step (the standard fairseq / Hugging Face scheme):

1. candidate score = beam sum + log p(token), processors applied, ``<eos>`` forced at
   ``max_len``; take the 2K' best candidates of each unit (over K' beams x V tokens); with
   groups, group g's candidates first lose ``diversity_penalty`` for every open beam of an
   earlier group of the image that took the same token at this step (Hamming diversity,
   Vijayakumar et al. 2018, as Hugging Face: the penalty stays in the beam's score);
2. ``<eos>`` candidates ranked among the first K' go to the unit's pool of finished
   hypotheses, scored ``sum / length ** length_penalty`` (length = words + ``<eos>``;
   0 = raw sum; Hugging Face style, not GNMT's ((5 + len) / 6) ** alpha); the pool keeps the best K';
3. the K' best non-``<eos>`` candidates become the open beams
   (``state.reorder(unit * K' + source beam)``);
4. a unit is done when its pool is full and no open beam can beat the pool's worst score:
   log-probs are <= 0, so an open beam's best possible final score is its current sum divided
   by the most favourable remaining length; it is done too when no open beam can go on (the
   rules left none: it keeps the captions it has; with none at all that is an error); the
   search stops when every unit is done or at ``max_len``, where all open beams are closed
   with ``<eos>``. An image's captions are the best of its G pools.

At step 0 all K beams of an image are identical, so the model runs that step once per image
and its output and state are then copied to the K beams (``state.reorder(..., group=K)``);
only each unit's beam 0 is expanded (the others start at -inf), so no duplicates appear.
Legend: B images, K beams, G groups, K' = K / G, U = B * G units, V vocab, L = max_len + 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from catcap.decoding.output import GenerationOutput, StepRecord
from catcap.decoding.processors import NEG_INF, MaskingProcessor, StepCheck, apply_processors


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
    """Finished hypotheses, K' per unit, best first: scores/sums/lengths (U, K'),
    tokens (U, K', L) padded, token_log_probs (U, K', L); rows (U, K'): each one's row at its
    last step, kept only while attention maps are recorded (else None)."""

    scores: Tensor
    sums: Tensor
    lengths: Tensor
    tokens: Tensor
    token_log_probs: Tensor
    rows: Tensor | None = None

    @classmethod
    def empty(cls, units: int, beams: int, width: int, pad_id: int, device, with_rows: bool = False) -> "Pool":
        scores = torch.full((units, beams), NEG_INF, device=device)
        tokens = torch.full((units, beams, width), pad_id, dtype=torch.long, device=device)
        lengths = torch.zeros(units, beams, dtype=torch.long, device=device)
        return cls(scores, scores.clone(), lengths, tokens, torch.zeros(units, beams, width, device=device),
                   lengths.clone() if with_rows else None)

    def merged(self, new: "Pool") -> "Pool":
        """The best K' of the pool and ``new`` (U, K') entries; on equal scores the pool wins."""
        keep = self.scores.shape[1]
        scores = torch.cat([self.scores, new.scores], dim=1)
        order = scores.sort(dim=1, descending=True, stable=True).indices[:, :keep]

        def pick(a: Tensor, b: Tensor) -> Tensor:
            both = torch.cat([a, b], dim=1)
            index = order.view(*order.shape, *([1] * (both.dim() - 2))).expand(-1, -1, *both.shape[2:])
            return both.gather(1, index)

        return Pool(*(pick(getattr(self, f), getattr(new, f)) for f in
                      ("scores", "sums", "lengths", "tokens", "token_log_probs")),
                    None if self.rows is None else pick(self.rows, new.rows))

    def done(self, open_sums: Tensor, step: int, max_len: int, alpha: float) -> Tensor:
        """(U,) True where the pool is full and no open beam (sums (U, K')) can beat its worst."""
        worst = self.scores[:, -1]
        bound = best_possible(open_sums.max(dim=1).values, step, max_len, alpha)
        return torch.isfinite(worst) & (bound <= worst)


class BeamSearch:
    """The beam-search strategy of :func:`catcap.decoding.generate` (see the module doc):
    ``beams`` K per image in ``groups`` G units, ``length_penalty`` alpha, ``diversity_penalty``
    between groups, the ``num_return`` best finished hypotheses of each image returned. The open
    beams' tokens and log-probs live in (B*K, max_len + 1) buffers allocated once (and a spare
    pair that a step's reorder gathers into); ``static``: no host read per step (errors are
    raised after the loop; a settled unit keeps stepping but takes nothing more into its pool)."""

    def __init__(self, model, images: int, beams: int, groups: int, max_len: int, processors: tuple,
                 length_penalty: float, diversity_penalty: float, num_return: int, device, record: bool = False,
                 static: bool = False):
        self.model, self.images, self.beams, self.groups = model, images, beams, groups
        self.max_len, self.processors, self.alpha = max_len, processors, length_penalty
        self.diversity, self.num_return = diversity_penalty, num_return
        self.units, self.k = images * groups, beams // groups
        self.group = 1  # the first step runs once per image (widened to K beams by widen)
        self.first_tokens = torch.full((images,), model.bos_id, dtype=torch.long, device=device)
        self.sums = torch.zeros(self.units, self.k, device=device)
        self.sums[:, 1:] = NEG_INF  # step 0: only beam 0 of each unit is expanded
        rows, width = images * beams, max_len + 1
        self.buffers = [(self.first_tokens.new_empty(rows, width), self.sums.new_empty(rows, width)) for _ in range(2)]
        self.steps = 0  # columns written
        self.pool = Pool.empty(self.units, self.k, max_len + 1, model.pad_id, device, with_rows=record)
        self.done = torch.zeros(self.units, dtype=torch.bool, device=device)
        self.first_row = torch.arange(self.units, device=device)[:, None] * self.k
        self.check = StepCheck(_no_candidate_message, static, device)

    @property
    def history(self) -> Tensor:
        """(B*K, t) the open beams' tokens so far."""
        return self.buffers[0][0][:, :self.steps]

    @property
    def history_lp(self) -> Tensor:
        """(B*K, t) their log-probs."""
        return self.buffers[0][1][:, :self.steps]

    def _extend(self, rows: Tensor, tokens: Tensor, log_probs: Tensor) -> None:
        """The open beams after a step: rows ``rows`` of the history gathered into the spare
        buffers, plus this step's tokens and log-probs; the spare becomes the history."""
        (tokens_now, lp_now), (tokens_next, lp_next) = self.buffers
        t = self.steps
        torch.index_select(tokens_now[:, :t], 0, rows, out=tokens_next[:, :t])
        if log_probs.requires_grad:  # out= does not record autograd; a slice assignment does
            lp_next[:, :t] = lp_now[:, :t].index_select(0, rows)
        else:
            torch.index_select(lp_now[:, :t], 0, rows, out=lp_next[:, :t])
        tokens_next[:, t], lp_next[:, t] = tokens, log_probs
        self.buffers.reverse()
        self.steps = t + 1

    def widen(self, logits: Tensor, state, record: StepRecord | None):
        """Step 0's one row per image -> its K identical beams (logits, state, recorded extras)."""
        beams = torch.arange(self.images, device=logits.device).repeat_interleave(self.beams)
        if record is not None:
            record.select(beams)
        return logits.index_select(0, beams), state.reorder(beams, group=self.beams)

    def advance(self, logits: Tensor, step: int) -> tuple[Tensor, Tensor]:
        """One step (module doc): the open beams' tokens (B*K,) and their source rows (B*K,)."""
        eos, k = self.model.eos_id, self.k
        log_probs = logits.float().log_softmax(dim=-1)
        totals = _totals(self.sums, log_probs, self.processors, self.history, step, step == self.max_len, eos)
        if self.groups == 1:
            cand_sums, source, cand_tokens = _candidates(totals, self.units)  # (U, 2K') each
            keep = _open_beams(cand_tokens == eos, k)
        else:
            cand_sums, source, cand_tokens, keep = diverse_candidates(totals, self.images, self.groups,
                                                                      self.diversity, eos)
        rows = self.first_row + source  # (U, 2K') source rows
        cand_lp = log_probs.view(self.units, -1).gather(1, source * log_probs.shape[1] + cand_tokens)
        self.pool = self.pool.merged(_finished(cand_sums, cand_tokens, cand_lp, rows, self.history, self.history_lp,
                                               self.done, step, self.max_len, self.alpha, self.model,
                                               self.pool.rows is not None))
        exhausted = torch.isneginf(cand_sums[:, 0]) & ~self.done  # no open beam of the unit can go on
        self.check((exhausted & torch.isneginf(self.pool.scores[:, 0])).any(), step)
        self.sums, rows = cand_sums.gather(1, keep), rows.gather(1, keep).view(-1)
        tokens = cand_tokens.gather(1, keep).view(-1)
        self._extend(rows, tokens, cand_lp.gather(1, keep).view(-1))
        self.done = self.done | exhausted | self.pool.done(self.sums, step, self.max_len, self.alpha)
        return tokens, rows

    def output(self, record: StepRecord | None) -> GenerationOutput:
        self.check.raise_if_failed()
        out, rows = _output(_by_image(self.pool, self.images), self.num_return, self.groups > 1)
        if record is not None:
            for name, value in record.follow(rows, out.lengths, out.mask).items():
                setattr(out, name, value)
        return out


def _totals(sums: Tensor, log_probs: Tensor, processors: tuple, history: Tensor, step: int, last: bool,
            eos_id: int) -> Tensor:
    """Every continuation's summed score (B*K, V) from the beams' sums (U, K'): beam sum + processed log-prob, only ``<eos>``
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
    """Summed scores (U*K', V) -> the 2K' best continuations of each unit (``images`` units),
    best first: their sums (U, 2K'), source beams and tokens (U, 2K'): one top-k over all K' x V sums. (Two top-k's, each
    beam's 2K best tokens first, pick the same candidates without writing the (B*K, V) sums, but
    measured no faster: two_topk in benchmarks/results/decode.md.)"""
    k, vocab = totals.shape[0] // images, totals.shape[1]
    cand_sums, cand = totals.view(images, -1).topk(2 * k, dim=1)
    return cand_sums, torch.div(cand, vocab, rounding_mode="floor"), cand % vocab


def _no_candidate_message(step: int) -> str:
    """A unit whose beams cannot go on is finished with the captions it has; with none, the
    rules left it no caption at all: an error."""
    return (f"at step {step} the logit processors forbid every continuation of every beam "
            "of some image; relax the rules (min_len, suppressed ids, n-gram blocking)")


def _open_beams(is_eos: Tensor, k: int) -> Tensor:
    """(U, 2K') candidates, best first -> (U, K') positions of the K' best non-``<eos>`` ones."""
    width = is_eos.shape[1]
    key = is_eos.long() * width + torch.arange(width, device=is_eos.device)
    return key.argsort(dim=1)[:, :k]


def _finished(cand_sums, cand_tokens, cand_lp, rows, history, history_lp, done, step, max_len, alpha, model,
              with_rows: bool) -> Pool:
    """The ``<eos>`` candidates among each unit's first K' as a (U, K') :class:`Pool` to merge."""
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
    return Pool(scores, sums.masked_fill(~ok, NEG_INF), lengths, tokens.view(b, k, width), token_lp.view(b, k, width),
                rows.view(b, k) if with_rows else None)


def _by_image(pool: Pool, images: int) -> Pool:
    """The G pools of each image as one (B, K) pool, best first (G = 1: the pool itself)."""
    if pool.scores.shape[0] == images:
        return pool
    views = {f: None if getattr(pool, f) is None else getattr(pool, f).reshape(images, -1, *getattr(pool, f).shape[2:])
             for f in ("scores", "sums", "lengths", "tokens", "token_log_probs", "rows")}
    order = views["scores"].sort(dim=1, descending=True, stable=True).indices

    def pick(x: Tensor | None) -> Tensor | None:
        if x is None:
            return None
        return x.gather(1, order.view(*order.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))

    return Pool(*(pick(views[f]) for f in ("scores", "sums", "lengths", "tokens", "token_log_probs", "rows")))


def _output(pool: Pool, num_return: int, plain_sums: bool) -> tuple[GenerationOutput, Tensor | None]:
    """The best ``num_return`` of every image's (B, K) pool as image-major rows, trimmed to the
    longest, and their rows at their last step (None unless recorded). ``plain_sums``: the
    pool's sums hold diversity penalties; ``log_probs`` then sums the per-token log-probs."""
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
    sums = token_lp.sum(dim=1) if plain_sums else pool.sums[:, :num_return].reshape(-1)
    rows = None if pool.rows is None else pool.rows[:, :num_return].reshape(-1)
    return GenerationOutput(tokens, sums, lengths, token_lp, mask, pool.scores[:, :num_return].reshape(-1),
                            num_return), rows


def diverse_candidates(totals: Tensor, images: int, groups: int, penalty: float, eos_id: int):
    """Step 1 with groups: the summed scores (B*K, V) of every continuation -> per unit (U = B*G
    rows, unit ``b * G + g``) the 2K' best candidates' sums, source beams and tokens (U, 2K')
    and the positions of its K' open beams among them (U, K'). Groups choose in order; group g's
    sums first lose ``penalty`` times the number of open beams of groups < g of the image that
    took each token at this step (beams with a finite score; a group whose pool is settled
    still counts, as its beams go on, so the captions do not depend on when a group stops)."""
    vocab = totals.shape[1]
    k = totals.shape[0] // (images * groups)
    by_group = totals.view(images, groups, k, vocab)
    taken = totals.new_zeros(images, vocab)  # open beams of earlier groups per token
    chosen = []
    for g in range(groups):
        scores = by_group[:, g] if g == 0 else by_group[:, g] - penalty * taken[:, None, :]
        cand_sums, source, cand_tokens = _candidates(scores.reshape(images * k, vocab), images)
        keep = _open_beams(cand_tokens == eos_id, k)
        counted = torch.isfinite(cand_sums.gather(1, keep))
        taken.scatter_add_(1, cand_tokens.gather(1, keep), counted.to(taken.dtype))
        chosen.append((cand_sums, source, cand_tokens, keep))
    return tuple(torch.stack(parts, 1).view(images * groups, -1) for parts in zip(*chosen))
