"""Traditional cross attention (TCA): ``c_t = q_t + MHA(LayerNorm(q_t), X, X)``."""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention
from catcap.registry import CROSS_ATTENTION


@CROSS_ATTENTION.register("vanilla")
class VanillaCrossAttention(nn.Module):
    """Cross attention from caption positions to the image regions (B batch, N regions)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.dropout = nn.Dropout(dropout)

    def prepare(self, memory: Tensor) -> KeyValue:
        """(B, N, D) encoder output -> keys/values, once per image."""
        return self.attn.project_kv(memory)

    def forward(self, q: Tensor, prepared: KeyValue, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D), R = B * group captions (image-major) -> (R, T, D); every position
        attends to its image's real regions (the group's captions share them, no copies)."""
        rows, t, d = q.shape
        grouped = self.norm(q).reshape(rows // group, group * t, d)
        out, _ = self.attn(grouped, prepared, memory_mask[:, None, :])
        return q + self.dropout(out.reshape(rows, t, d)), {}

    def init_cache(self, rows: int):
        return None

    def step(self, q: Tensor, prepared: KeyValue, memory_mask: Tensor, cache, group: int):
        """q (B*G, 1, D): the G hypotheses of an image attend as G queries (no memory copies)."""
        rows, _, d = q.shape
        grouped = self.norm(q).view(rows // group, group, d)
        out, _ = self.attn(grouped, prepared, memory_mask[:, None, :])
        return q + self.dropout(out.reshape(rows, 1, d)), cache, {}
