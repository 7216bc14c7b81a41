"""Feature projection and the Transformer encoder over image regions (SPEC.md §1-2).

Regions get no positional encoding. Blocks are pre-norm residual blocks
(``x + SubLayer(LayerNorm(x))``) with a final LayerNorm, the same residual form the decoder's
cross attention (and CACA) uses.
"""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.attention import MultiHeadAttention
from catcap.models.layers import FeedForward, rows_through
from catcap.models.linear import Linear
from catcap.registry import ENCODERS


class FeatureProjection(nn.Module):
    """Region features (B, N, F) -> (B, N, D): Linear + ReLU + dropout + LayerNorm."""

    def __init__(self, feature_dim: int, d_model: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(Linear(feature_dim, d_model), nn.ReLU(inplace=True), nn.Dropout(dropout), nn.LayerNorm(d_model))

    def forward(self, features: Tensor) -> Tensor:
        return rows_through(self.net, features)


class EncoderLayer(nn.Module):
    """Self-attention over regions + FFN, pre-norm residual."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, N, D), mask (B, N) True = real region."""
        h = self.norm1(x)
        x = x + self.dropout(self.attn(h, self.attn.project_kv(h), mask[:, None, :])[0])
        return x + self.dropout(self.ffn(self.norm2(x)))


@ENCODERS.register("transformer")
class TransformerEncoder(nn.Module):
    """(B, N, F) features + (B, N) mask -> (B, N, D) memory."""

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float):
        super().__init__()
        self.project = FeatureProjection(feature_dim, d_model, dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        x = self.project(features)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)
