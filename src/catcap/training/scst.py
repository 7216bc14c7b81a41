"""Self-critical sequence training (Rennie et al. 2017) with the CIDEr-D reward.

One SCST step on a batch of B images:

1. **Sample** under ``no_grad`` in eval mode with the cached decoder: n captions per image
   (``baseline: greedy`` or ``mean``: multinomial samples; ``beam``: the n beams of a beam
   search, as in M2). ``<pad>``, ``<bos>`` and ``<unk>`` are never generated.
2. **Reward** every caption with CIDEr-D against the image's references, document
   frequencies from the training references (:mod:`catcap.training.reward`). A caption is its
   words before ``<eos>`` (``<eos>`` itself is not a word), exactly what evaluation scores.
3. **Baseline** per caption: ``greedy`` the reward of the image's greedy caption, ``mean`` the
   mean reward of the image's *other* n-1 samples, ``beam`` the mean reward of its n beams.
4. **Score** the sampled captions' log-probabilities in *one* teacher-forced forward pass with
   gradients (train mode; the encoder runs once per image; positions after ``<eos>`` masked),
   instead of keeping the autoregressive graph of the sampling loop.
5. **Loss** ``-(1/R) sum_r (reward_r - baseline_r) * sum_t log p(w_rt)`` over the R = B * n
   captions (policy gradient with a baseline; the sum runs over words and ``<eos>``, except an
   ``<eos>`` forced at ``max_len``, which the sampler did not choose: :func:`chosen_mask`).

Legend: B images, n captions per image, R = B * n, T steps, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from catcap.decoding import GenerationConfig, build_generation_config, generate

BASELINES = ("greedy", "mean", "beam")


@dataclass
class SCSTConfig:
    """``train.scst``: baseline greedy | mean | beam (see the module doc); num_samples n per
    image (the beam size for ``beam``); lr the fixed learning rate (paper 5e-6); max_len the
    longest sampled caption in words; patience: stop after this many SCST epochs without a
    better validation CIDEr-D; switch_patience: with ``train.objective=xe_then_scst``, switch
    when XE validation CIDEr-D has not improved for this many epochs (M2's rule); keep_awc:
    add the AWC term (``train.awc``) to the SCST loss too (the paper does not); cuda_graph: on a
    GPU, replay the update (scoring pass, backward, optimizer step) as one CUDA graph where it
    can be (:mod:`catcap.training.scst_graph` says where not; the same update, faster)."""

    baseline: Literal["greedy", "mean", "beam"] = "mean"
    num_samples: int = 5
    lr: float = 5e-6
    max_len: int = 16
    patience: int = 5
    switch_patience: int = 5
    keep_awc: bool = False
    cuda_graph: bool = True

    def __post_init__(self):
        from catcap.config import ConfigError

        if self.num_samples < 2 and self.baseline in ("mean", "beam"):
            raise ConfigError(f"train.scst.num_samples must be >= 2 for the {self.baseline!r} baseline, "
                              f"found {self.num_samples}")
        self.generation()
        self.greedy_generation()

    def generation(self) -> GenerationConfig:
        """How the n captions per image are drawn: ``num_samples`` samples (``baseline`` greedy or
        mean) or the ``num_samples`` beams of a beam search (``beam``), at most ``max_len`` words."""
        names = {"num_beams": "train.scst.num_samples", "num_return_sequences": "train.scst.num_samples",
                 "max_length": "train.scst.max_len"}
        if self.baseline == "beam":
            return build_generation_config({"num_beams": self.num_samples, "num_return_sequences": self.num_samples,
                                            "max_length": self.max_len}, names=names)
        return build_generation_config({"do_sample": True, "num_return_sequences": self.num_samples,
                                        "max_length": self.max_len}, names=names)

    def greedy_generation(self) -> GenerationConfig:
        """The greedy captions of the ``greedy`` baseline."""
        return build_generation_config({"num_beams": 1, "max_length": self.max_len},
                                       names={"max_length": "train.scst.max_len"})


def advantages(rewards: np.ndarray, baseline: str, greedy_rewards: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """rewards (B, n) -> (baselines (B, n), advantages (B, n)) for ``baseline``:
    greedy: greedy_rewards (B,) per image; mean: mean of the image's other n-1 rewards;
    beam: mean of the image's n rewards."""
    b, n = rewards.shape
    if baseline == "greedy":
        if greedy_rewards is None:
            raise ValueError("the greedy baseline needs the rewards of the greedy captions")
        base = np.repeat(np.asarray(greedy_rewards, dtype=np.float64)[:, None], n, axis=1)
    elif baseline == "mean":
        if n < 2:
            raise ValueError("the mean-of-others baseline needs at least 2 samples per image")
        base = (rewards.sum(axis=1, keepdims=True) - rewards) / (n - 1)
    elif baseline == "beam":
        base = np.repeat(rewards.mean(axis=1, keepdims=True), n, axis=1)
    else:
        raise ValueError(f"unknown SCST baseline {baseline!r}; choose one of {', '.join(BASELINES)}")
    return base, rewards - base


def draw_captions(model, features: Tensor, feature_mask: Tensor, cfg: SCSTConfig, vocab):
    """The n captions per image that SCST learns from (no grad, eval mode), with the caption
    rules of generation (never ``<pad>``, ``<bos>``, ``<unk>``): a GenerationOutput with rows
    image-major, plus the greedy captions' tokens for the greedy baseline (else None)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = generate(model, features, feature_mask, cfg.generation(), vocab=vocab)
            best = generate(model, features, feature_mask, cfg.greedy_generation(), vocab=vocab).tokens \
                if cfg.baseline == "greedy" else None
    finally:
        model.train(was_training)
    return out, best


def sequence_log_probs(model, features: Tensor, feature_mask: Tensor, tokens: Tensor, mask: Tensor, group: int):
    """One teacher-forced pass over generated captions, with gradients.

    tokens (R, T) generated ids after ``<bos>`` (R = B * group, image-major), mask (R, T) True =
    generated (words and ``<eos>``) -> per-token log-probs (R, T) (0 where masked) and the
    per-token entropy (R, T) of the model's distribution (detached, 0 where masked). The
    encoder runs once per image; its output is repeated for the image's captions.
    """
    memory, memory_mask = model.encode(features, feature_mask)
    bos = torch.full_like(tokens[:, :1], model.bos_id)
    inputs = torch.cat([bos, tokens[:, :-1]], dim=1)
    input_mask = torch.cat([torch.ones_like(mask[:, :1]), mask[:, :-1]], dim=1)
    logits, extras = model.decoder(inputs, input_mask, memory, memory_mask, group)
    log_probs = logits.float().log_softmax(dim=-1)
    chosen = log_probs.gather(2, tokens[..., None])[..., 0].masked_fill(~mask, 0.0)
    with torch.no_grad():
        entropy = -(log_probs.exp() * log_probs).sum(-1).masked_fill(~mask, 0.0)
    return chosen, entropy, extras, input_mask


def chosen_mask(mask: Tensor, max_len: int) -> Tensor:
    """The tokens the sampler chose: ``mask`` (R, T) without the ``<eos>`` forced at step
    ``max_len`` on captions that reached it. That token had probability 1 under the sampling
    rule, so it has no score-function term (self-critical.pytorch likewise leaves it out)."""
    if mask.shape[1] <= max_len:
        return mask
    chosen = mask.clone()
    chosen[:, max_len] = False
    return chosen


def policy_loss(token_log_probs: Tensor, advantage: Tensor) -> Tensor:
    """-(1/R) sum_r A_r sum_t log p_rt: token_log_probs (R, T) (0 where masked), advantage (R,)."""
    return -(advantage * token_log_probs.sum(dim=1)).mean()


@dataclass
class Drawn:
    """Steps 1-3 of an SCST step, what the update (steps 4-5) learns from: tokens (R, T) the
    sampled ids after ``<bos>``, chosen (R, T) True = chosen by the sampler (:func:`chosen_mask`),
    advantage (R,) float32 on the tokens' device, n captions per image, and the step's log record
    so far (rewards, baseline, lengths)."""

    tokens: Tensor
    chosen: Tensor
    advantage: Tensor
    n: int
    record: dict

    def padded(self, length: int, pad_id: int) -> "Drawn":
        """The same captions in ``length`` columns (the static shape of a captured update): the
        added positions hold ``pad_id`` and are not chosen, so they change no log-prob, loss or
        gradient (causal attention: no real position reads a later one)."""
        extra = length - self.tokens.shape[1]
        if extra < 0:
            raise ValueError(f"captions of {self.tokens.shape[1]} positions do not fit {length} columns: "
                             f"raise the padded length to train.scst.max_len + 1 or more")
        if extra == 0:
            return self
        return Drawn(torch.nn.functional.pad(self.tokens, (0, extra), value=pad_id),
                     torch.nn.functional.pad(self.chosen, (0, extra), value=False), self.advantage, self.n, self.record)


def draw_and_reward(model, batch, vocab, cfg: SCSTConfig, reward_fn) -> Drawn:
    """Steps 1-3 on an ImageBatch: sample, reward, baseline (see the module doc and :func:`scst_loss`)."""
    out, best = draw_captions(model, batch.features, batch.feature_mask, cfg, vocab)
    b, n = batch.features.shape[0], cfg.num_samples
    words = [vocab.decode(row.tolist()) for row in out.tokens.cpu()]
    image_of = np.repeat(np.arange(b), n)
    rewards = np.asarray(reward_fn(words, batch.references, image_of), dtype=np.float64).reshape(b, n)
    greedy_rewards = None
    if best is not None:
        greedy_rewards = np.asarray(reward_fn([vocab.decode(r.tolist()) for r in best.cpu()], batch.references,
                                              np.arange(b)), dtype=np.float64)
    base, adv = advantages(rewards, cfg.baseline, greedy_rewards)
    # ended by choice: <eos> drawn before max_len (at max_len it is forced, see chosen_mask)
    ended = (out.tokens.gather(1, (out.lengths - 1).clamp(min=0)[:, None])[:, 0] == vocab.eos_id) \
        & (out.lengths <= cfg.max_len)
    record = {
        "reward": float(rewards.mean()), "baseline": float(base.mean()), "advantage": float(adv.mean()),
        "advantage_std": float(adv.std()), "eos_fraction": float(ended.float().mean()),
        "length": float(np.mean([len(w) for w in words])),
    }
    if greedy_rewards is not None:
        record["greedy_reward"] = float(greedy_rewards.mean())
    advantage = torch.as_tensor(adv.reshape(-1), dtype=torch.float32, device=out.tokens.device)
    return Drawn(out.tokens, chosen_mask(out.mask, cfg.max_len), advantage, n, record)


def update_loss(score, features: Tensor, feature_mask: Tensor, drawn: Drawn):
    """Steps 4-5: the loss of the drawn captions and, for the log, the summed entropy of the
    model's distribution at the chosen positions and the AWC value (or None). ``score``:
    ``score(features, feature_mask, tokens, mask, n)`` -> (token log-probs, entropy, extras,
    input mask, awc value or None), e.g. the trainer's :class:`~catcap.training.objective.Objective`."""
    token_lp, entropy, _, _, awc_value = score(features, feature_mask, drawn.tokens, drawn.chosen, drawn.n)
    loss = policy_loss(token_lp, drawn.advantage.to(token_lp.dtype))
    if awc_value is not None:
        loss = loss + awc_value
    return loss, entropy.sum(), awc_value


def finished_record(drawn: Drawn, entropy_sum: Tensor, awc_value: Tensor | None) -> dict:
    """The step's log record: the drawn captions' plus the mean entropy per chosen token and AWC."""
    record = {**drawn.record, "entropy": float(entropy_sum) / max(int(drawn.chosen.sum()), 1)}
    if awc_value is not None:
        record["awc"] = float(awc_value.detach())
    return record


def scst_loss(model, batch, vocab, cfg: SCSTConfig, reward_fn, awc=None, score=None) -> tuple[Tensor, dict]:
    """Loss and log record of one SCST step on an ImageBatch (see the module doc).

    reward_fn(candidates: list[list[str]], references: list[list[list[str]]], cand_image) -> (C,)
    rewards, e.g. :class:`catcap.training.reward.CiderReward`; ``awc`` an
    :class:`~catcap.training.awc.AdaptiveWeightConstraint` added on the scored captions.
    ``score(features, feature_mask, tokens, mask, n)`` -> (token log-probs, entropy, extras,
    input mask, awc value or None) replaces the scoring pass (the trainer passes its
    :class:`~catcap.training.objective.Objective`, possibly wrapped in DDP); ``awc`` is then unused.
    """
    drawn = draw_and_reward(model, batch, vocab, cfg, reward_fn)
    model.train()
    if score is None:
        def score(features, feature_mask, tokens, mask, n):
            lp, entropy, extras, input_mask = sequence_log_probs(model, features, feature_mask, tokens, mask, n)
            return lp, entropy, extras, input_mask, (awc(extras, mask) if awc is not None else None)
    loss, entropy_sum, awc_value = update_loss(score, batch.features, batch.feature_mask, drawn)
    return loss, finished_record(drawn, entropy_sum, awc_value)
