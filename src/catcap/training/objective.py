"""The differentiable part of a training step as one module: the captioner plus the AWC term.

DistributedDataParallel synchronises the gradients of the parameters of the module it wraps,
during the backward of that module's ``forward``. Wrapping this module (not the bare captioner)
puts the learnable AWC betas under DDP too, and gives SCST's teacher-forced scoring pass (which
calls the encoder and decoder, not ``CaptionModel.forward``) a ``forward`` to go through.
Legend: B batch, T caption positions, V vocabulary, R = B * n sampled captions.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from catcap.training.awc import AdaptiveWeightConstraint, history_stats
from catcap.training.losses import cross_entropy
from catcap.training.mlm import MLMConfig, masked_batch, masked_lm_loss
from catcap.training.scheduled_sampling import scheduled_forward
from catcap.training.scst import sequence_log_probs


class Objective(nn.Module):
    """``forward("xe", batch, label_smoothing)`` -> dict(xe, awc?, history_weight?);
    ``forward("scst", features, feature_mask, tokens, mask, n)`` -> (token log-probs (R, T),
    entropy (R, T), extras, input mask (R, T), awc value or None)."""

    def __init__(self, model: nn.Module, awc: Optional[AdaptiveWeightConstraint] = None, scst_awc: bool = False):
        super().__init__()
        self.model, self.awc, self.scst_awc = model, awc, scst_awc
        self._compiled = None

    def compile_forward(self) -> None:
        """Run the XE forward through ``torch.compile(model, dynamic=True)`` (``train.compile``).
        Kept out of the module tree (same parameters, not registered twice)."""
        object.__setattr__(self, "_compiled", torch.compile(self.model, dynamic=True))

    def forward(self, kind: str, *args):
        if kind == "xe":
            return self.xe(*args)
        if kind == "scst":
            return self.scst(*args)
        if kind == "mlm":
            return self.mlm(*args)
        raise ValueError(f"unknown objective part {kind!r}: expected 'xe', 'scst' or 'mlm'")

    def mlm(self, batch, cfg: MLMConfig, seed: int) -> dict:
        """VLP's masked-token prediction on a caption batch (``catcap.training.mlm``): the mean
        cross-entropy over the selected positions, under the mask kind drawn for the batch."""
        vocab_size = self.model.decoder.output.out_features
        targets, real, inputs, selected, kind = masked_batch(batch.captions, batch.caption_mask, vocab_size, cfg, seed)
        memory, memory_mask = self.model.encode(batch.features, batch.feature_mask)
        logits = self.model.decoder.masked_lm(memory, memory_mask, inputs, real, kind)
        return {"mlm": masked_lm_loss(logits, targets, selected)}

    def xe(self, batch, label_smoothing: float = 0.0, sampling: float = 0.0, sampling_mode: str = "sample") -> dict:
        """Token-mean XE of a caption batch (and caption-mean AWC); ``history_weight`` for the
        log. ``sampling`` > 0: scheduled sampling with that probability (step by step)."""
        if sampling > 0:
            logits, extras, _ = scheduled_forward(self.model, batch.features, batch.feature_mask, batch.captions,
                                                  sampling, sampling_mode)
        else:
            model = self.model if self._compiled is None else self._compiled
            logits, extras = model(batch.features, batch.feature_mask, batch.captions, batch.caption_mask)
        # a_t of the steps that predict a real token (words and <eos>): the step whose input is
        # <eos> predicts padding and is not part of the caption (SPEC.md §3: padding excluded)
        query_mask = batch.caption_mask[:, 1:]
        out = {"xe": cross_entropy(logits, batch.captions[:, 1:], batch.caption_mask[:, 1:], label_smoothing),
               **history_stats(extras, query_mask)}
        if self.awc is not None:
            out["awc"] = self.awc(extras, query_mask)
        return out

    def scst(self, features: Tensor, feature_mask: Tensor, tokens: Tensor, mask: Tensor, n: int):
        lp, entropy, extras, input_mask = sequence_log_probs(self.model, features, feature_mask, tokens, mask, n)
        awc_value = self.awc(extras, mask) if (self.awc is not None and self.scst_awc) else None
        return lp, entropy, extras, input_mask, awc_value


def count_targets(batch) -> int:
    """Real target tokens of a caption batch (the XE mean's denominator)."""
    return int(batch.caption_mask[:, 1:].sum())


def uses_all_parameters(objective: Objective, phase: str) -> bool:
    """Whether every trainable parameter gets a gradient in ``phase`` (DDP needs to know):
    adaptive betas are unused in SCST unless ``scst.keep_awc``."""
    has_betas = objective.awc is not None and any(p.requires_grad for p in objective.awc.parameters())
    return not (has_betas and phase == "scst" and not objective.scst_awc)
