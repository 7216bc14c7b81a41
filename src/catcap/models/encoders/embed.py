"""The recurrent captioners' encoder: each region embedded on its own, no self-attention.

``v_i = Dropout(ReLU(W R_i + b))`` (B, N, F) -> (B, N, D), as the anchors' LSTM captioners
(Att2in, Up-Down, Look-Back) embed bottom-up features before attending to them. Returned as one
level, (B, 1, N, D), like every encoder's memory. With ``pooled`` (Up-Down's
``model.rnn.pooled_embedding``) the anchors' embedding of the pooled feature comes along: level
0 is ``W_f R_i + b_f`` per region, whose mean over an image's regions is ``W_f mean_i R_i + b_f``
(the decoder applies ReLU and dropout), and the embedded regions are level 1: (B, 2, N, D).
The encoder has no layers, heads or FFN: ``model.encoder_layers``, ``num_heads`` and ``d_ff``
do not apply to it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from catcap.models.layers import rows_through
from catcap.models.linear import Linear
from catcap.registry import ENCODERS


@ENCODERS.register("embed")
class RegionEmbedding(nn.Module):
    """Region features (B, N, F) -> memory (B, 1, N, D): Linear + ReLU + dropout per region."""

    keeps_all_levels = False
    embeds_pooled = True  # model.rnn.pooled_embedding: level 0 is the pooled feature's embedding

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 0, pooled: bool = False):
        super().__init__()
        if memory_slots:
            raise ValueError(f"the {type(self).__name__} encoder takes no memory slots (found model.memory_slots="
                             f"{memory_slots}); use model.encoder=memory_augmented or leave model.memory_slots unset")
        self.net = nn.Sequential(Linear(feature_dim, d_model), nn.ReLU(inplace=True), nn.Dropout(dropout))
        self.pooled = Linear(feature_dim, d_model) if pooled else None

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        """features (B, N, F), mask (B, N) (padded regions are masked by the decoder) -> (B, 1, N, D),
        or (B, 2, N, D) with the pooled feature's embedding."""
        regions = rows_through(self.net, features)
        if self.pooled is None:
            return regions[:, None]
        return torch.stack([self.pooled(features), regions], 1)
