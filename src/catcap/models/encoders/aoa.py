"""AoANet's refiner (Huang et al. 2019; SPEC.md §5): regions embedded, then refined by
self-attention with attention on attention.

    A_0   = Dropout(ReLU(W R + b))                                (the region embedding)
    A_l   = A_{l-1} + Dropout(AoA(MHA(LN(A_{l-1}) x3), LN(A_{l-1})))   l = 1..L (6)
    A     = LN(A_L)

MHA has no output layer (the AoA layer follows, :class:`~catcap.models.cross.aoa.AttentionOnAttention`),
the residual blocks are pre-norm with a final LayerNorm, and there is no feed-forward layer
(the reference recipe's ``use_ff 0``; ``model.d_ff`` is not read). Dropouts as the reference:
``model.dropout`` (the language model's, 0.5) after the embedding, 0.1 on the attention weights
and the residual branch, 0.3 on the AoA layer's input. Padded regions are never attended to.
Returned as one level (B, 1, N, D).
"""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.attention import MultiHeadAttention, attend
from catcap.models.cross.aoa import ATTENTION_DROPOUT, AttentionOnAttention
from catcap.models.encoders.embed import RegionEmbedding
from catcap.registry import ENCODERS

#: the reference refiner's dropouts: residual branch, and the AoA layer's input
RESIDUAL_DROPOUT = 0.1
AOA_DROPOUT = 0.3


class RefinerLayer(nn.Module):
    """``x + Dropout(AoA(MHA(LN x), LN x))`` over the regions of each image."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, ATTENTION_DROPOUT, output=False)
        self.aoa = AttentionOnAttention(d_model, d_model, d_model, AOA_DROPOUT)
        self.dropout = nn.Dropout(RESIDUAL_DROPOUT)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, N, D), mask (B, N) True = real region -> (B, N, D)."""
        h = self.norm(x)
        kv = self.attn.project_kv(h)
        heads, _ = attend(self.attn.project_q(h), kv.k, kv.v, mask[:, None, :],
                          self.attn.dropout if self.training else 0.0)
        return x + self.dropout(self.aoa(self.attn.merge(heads), h))


@ENCODERS.register("aoa_refiner")
class AoARefiner(RegionEmbedding):
    """Region features (B, N, F) -> refined regions (B, 1, N, D): embedding, ``num_layers``
    refiner layers, LayerNorm."""

    keeps_all_levels = False
    embeds_pooled = False

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 0):
        super().__init__(feature_dim, d_model, num_heads, num_layers, d_ff, dropout, memory_slots)
        self.layers = nn.ModuleList(RefinerLayer(d_model, num_heads) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        x = super().forward(features, mask)[:, 0]
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)[:, None]
