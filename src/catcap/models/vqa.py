"""VLP's visual question answering (SPEC.md §5): the one-stream model reads
``[CLS] r_1..r_N [SEP] q_1..q_T [STOP]`` under the bidirectional mask and a head on the
element-wise product of the final [CLS] and [SEP] states scores every answer of the answer
vocabulary independently,

    p = sigmoid(W_2 ReLU(W_1 (h_CLS * h_SEP) + b_1) + b_2)        (A answers)

trained with binary cross-entropy against the soft scores of :mod:`catcap.data.vqa` (summed over
answers, averaged over questions, as VQA models usually train). The hidden width is 2D.
Legend: B questions, N regions, T question tokens, D width, A answers.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from catcap.models.linear import Linear
from catcap.models.vlp import VLPDecoder


class VQAHead(nn.Module):
    """(h_CLS, h_SEP) (B, D) each -> answer logits (B, A) (the sigmoid is the loss's / caller's)."""

    def __init__(self, d_model: int, num_answers: int):
        super().__init__()
        self.net = nn.Sequential(Linear(d_model, 2 * d_model), nn.ReLU(inplace=True), Linear(2 * d_model, num_answers))

    def forward(self, cls: Tensor, sep: Tensor) -> Tensor:
        return self.net(cls * sep)


class VLPQuestionAnswerer(nn.Module):
    """A VLP model (region embedding ``encoder`` + shared Transformer ``vlp``) with a VQA head."""

    def __init__(self, encoder: nn.Module, vlp: VLPDecoder, num_answers: int):
        super().__init__()
        self.encoder, self.vlp = encoder, vlp
        self.head = VQAHead(vlp.d_model, num_answers)

    def forward(self, features: Tensor, feature_mask: Tensor, tokens: Tensor, token_mask: Tensor) -> Tensor:
        """features (B, N, F), feature_mask (B, N), question tokens (B, T) ending in [STOP] with
        token_mask (B, T) -> answer logits (B, A)."""
        states = self.vlp.joint_states(self.encoder(features, feature_mask), feature_mask, tokens, token_mask,
                                       "bidirectional")
        return self.head(states[:, 0], states[:, features.shape[1] + 1])


def vqa_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """logits (B, A), soft targets (B, A) in [0, 1] -> BCE summed over answers, mean over questions."""
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / logits.shape[0]
