"""The recurrent captioners' encoder: each region embedded on its own, no self-attention.

``v_i = Dropout(ReLU(W R_i + b))`` (B, N, F) -> (B, N, D), as the anchors' LSTM captioners
(Att2in, Up-Down, Look-Back) embed bottom-up features before attending to them. Returned as one
level, (B, 1, N, D), like every encoder's memory. The encoder has no layers, heads or FFN:
``model.encoder_layers``, ``num_heads`` and ``d_ff`` do not apply to it.
"""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.layers import rows_through
from catcap.models.linear import Linear
from catcap.registry import ENCODERS


@ENCODERS.register("embed")
class RegionEmbedding(nn.Module):
    """Region features (B, N, F) -> memory (B, 1, N, D): Linear + ReLU + dropout per region."""

    keeps_all_levels = False

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 0):
        super().__init__()
        if memory_slots:
            raise ValueError(f"the {type(self).__name__} encoder takes no memory slots (found model.memory_slots="
                             f"{memory_slots}); use model.encoder=memory_augmented or leave model.memory_slots unset")
        self.net = nn.Sequential(Linear(feature_dim, d_model), nn.ReLU(inplace=True), nn.Dropout(dropout))

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        """features (B, N, F), mask (B, N) (padded regions are masked by the decoder) -> (B, 1, N, D)."""
        return rows_through(self.net, features)[:, None]
