"""Traditional cross attention (TCA): ``c_t = q_t + Mix(LN(q_t), [MHA(LN(q_t), X_i, X_i)]_i)``.

With the Transformer decoder's mix (:class:`~catcap.models.cross.mix.TopLevel`) this is
``c_t = q_t + MHA(LayerNorm(q_t), X, X)`` over the encoder's top level; with M2's meshed
gates it is M2's meshed cross attention over every encoder level.
"""

from __future__ import annotations

from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention, attend, level_queries
from catcap.models.cross.mix import TopLevel, top_levels
from catcap.registry import CROSS_ATTENTION


@CROSS_ATTENTION.register("vanilla")
class VanillaCrossAttention(nn.Module):
    """Cross attention from caption positions to the image regions (B batch, N regions,
    L encoder levels read, as the mix says).

    Over several levels on a CPU the attention is computed as scores, softmax and product
    rather than by PyTorch's fused kernel: with M2's 3 x 8 level-heads the fused CPU kernel
    took 2.15 ms per greedy step and layer against 1.56 ms (50 images, 50 regions, one
    thread), while over one level the two are within 10% (benchmarks/results/m2.md)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, mix: nn.Module | None = None):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.dropout = nn.Dropout(dropout)
        self.mix = mix if mix is not None else TopLevel()

    def prepare(self, memory: Tensor) -> KeyValue:
        """(B, N, D) or (B, L', N, D) encoder output -> level-head keys/values (B, L*H, N, d_k),
        once per image."""
        return self.attn.project_kv_levels(top_levels(memory, self.mix.levels))

    def forward(self, q: Tensor, prepared: KeyValue, memory_mask: Tensor, query_mask: Tensor | None = None,
                group: int = 1):
        """q (R, T, D), R = B * group captions (image-major) -> (R, T, D); every position
        attends to its image's real regions (the group's captions share them, no copies)."""
        rows, t, d = q.shape
        grouped = self.norm(q).reshape(rows // group, group * t, d)
        levels = self.mix.levels
        heads, _ = attend(level_queries(self.attn.project_q(grouped), levels), prepared.k, prepared.v,
                          memory_mask[:, None, :], self.attn.dropout if self.training else 0.0,
                          explicit=levels > 1 and q.device.type == "cpu")
        out = self.mix(grouped, self.attn.merge_levels(heads, levels))
        return q + self.dropout(out.reshape(rows, t, d)), {}

    def init_cache(self, rows: int):
        return None

    def step(self, q: Tensor, prepared: KeyValue, memory_mask: Tensor, cache, group: int):
        """q (B*G, 1, D): the G hypotheses of an image attend as G queries (no memory copies)."""
        c, extras = self.forward(q, prepared, memory_mask, None, group)
        return c, cache, extras
