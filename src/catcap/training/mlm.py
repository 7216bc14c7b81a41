"""Masked-token prediction, VLP's pre-training objective (SPEC.md §5; Devlin et al.'s recipe).

Of the maskable positions (caption words and [STOP]; never [CLS], [SEP], regions or padding),
each is selected with probability ``rate`` (0.15); a selected position is replaced by [MASK]
with probability 0.8, by a random vocabulary word with probability 0.1, and kept with
probability 0.1, and the model predicts the original token there. Selections are independent
per position (BERT's), so a caption may have none selected; the loss averages over the selected
positions of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from catcap.data.vocab import SPECIALS
from catcap.models.vlp import MASK_ID

#: the first vocabulary id that is a word (random replacements never draw a special token)
FIRST_WORD = len(SPECIALS)


@dataclass
class MLMConfig:
    """``train.mlm``: pre-train a VLP model by masked-token prediction instead of captioning XE.
    ``rate`` the share of caption positions selected; ``seq2seq_ratio`` the probability that a
    batch uses the seq2seq mask (else the bidirectional one): VLP's mix of the two objectives,
    drawn per batch."""

    enabled: bool = False
    rate: float = 0.15
    seq2seq_ratio: float = 0.5

    def __post_init__(self):
        from catcap.config import ConfigError

        if not 0.0 < self.rate <= 1.0:
            raise ConfigError(f"train.mlm.rate is the share of words masked, in (0, 1]; found {self.rate!r}")
        if not 0.0 <= self.seq2seq_ratio <= 1.0:
            raise ConfigError(f"train.mlm.seq2seq_ratio is a probability; found {self.seq2seq_ratio!r}")


def masked_batch(captions: Tensor, caption_mask: Tensor, vocab_size: int, cfg: MLMConfig, seed: int):
    """A caption batch (``<bos> w .. <eos> <pad>``, (B, T + 1)) -> (targets (B, T) = the words and
    [STOP], their mask, inputs with the masking applied, selected (B, T), the mask kind), drawn
    from ``seed`` alone (so a resumed run draws the same masks)."""
    g = torch.Generator().manual_seed(seed)
    targets, real = captions[:, 1:], caption_mask[:, 1:]
    inputs, selected = mask_tokens(targets.cpu(), real.cpu(), vocab_size, FIRST_WORD, cfg.rate, g)
    kind = "seq2seq" if float(torch.rand((), generator=g)) < cfg.seq2seq_ratio else "bidirectional"
    return targets, real, inputs.to(captions.device), selected.to(captions.device), kind


def mask_tokens(tokens: Tensor, maskable: Tensor, vocab_size: int, first_word: int, rate: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """tokens (B, T) caption ids, maskable (B, T) bool -> (inputs (B, T) with ``MASK_ID``,
    random words from ``first_word..vocab_size-1`` or the token kept at the selected positions;
    selected (B, T) bool, the positions to predict). ``first_word`` is the first id that is a
    word (random replacements never draw a special token)."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"the masking rate must be in (0, 1], found {rate!r}")
    u = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    how = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    random_words = torch.randint(first_word, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    selected = maskable & (u < rate)
    inputs = torch.where(selected & (how < 0.8), torch.full_like(tokens, MASK_ID), tokens)
    inputs = torch.where(selected & (how >= 0.8) & (how < 0.9), random_words, inputs)
    return inputs, selected


def masked_lm_loss(logits: Tensor, targets: Tensor, selected: Tensor) -> Tensor:
    """logits (B, T, V), targets (B, T), selected (B, T) -> mean cross-entropy over the selected
    positions (0 when none is selected, with a gradient path)."""
    if not bool(selected.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[selected], targets[selected])
