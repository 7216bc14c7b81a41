"""Feature projection and the Transformer encoder over image regions (SPEC.md §1-2).

Regions get no positional encoding. Blocks are pre-norm residual blocks
(``x + SubLayer(LayerNorm(x))``) with a final LayerNorm, the same residual form the decoder's
cross attention (and CACA) uses.

Encoders return their memory as levels, (B, L, N, D): the Transformer encoder one level (its
output), M2's memory-augmented encoder (:class:`MemoryAugmentedEncoder`) the output of every
layer, each through its own LayerNorm. Either may append ``m`` learnable memory slots to its
self-attention's keys and values (:class:`MemorySlots`). :class:`M2Encoder` is the official
M2 encoder (aimagelab/meshed-memory-transformer): post-norm layers, its initialisation
(:func:`m2_initialise`); docs/m2.md says how the two M2 encoders differ.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from catcap.models.attention import KeyValue, MultiHeadAttention
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


class MemorySlots(nn.Module):
    """M2's persistent memory (memory-augmented attention): ``m`` learnable slots per head
    appended to the self-attention's keys and values,

        K = [W_k X; sqrt(d_k) M_k],   V = [W_v X; sqrt(m) M_v],

    with M_k ~ N(0, (1/d_k)^2) and M_v ~ N(0, (1/m)^2) at init: the initialisation the
    official ``ScaledDotProductAttentionMemory`` writes, which the official model's own
    initialisation then overwrites with Xavier-uniform values (:func:`m2_initialise` does that
    for :class:`M2Encoder`). The slots are the same for every image and attendable by every
    query. Stored (H, m, d_k); the official code stores (1, m, H * d_k)."""

    def __init__(self, num_slots: int, num_heads: int, d_k: int):
        super().__init__()
        self.num_slots, self.d_k = num_slots, d_k
        self.keys = nn.Parameter(torch.empty(num_heads, num_slots, d_k).normal_(0.0, 1.0 / d_k))  # M_k (H, m, d_k)
        self.values = nn.Parameter(torch.empty(num_heads, num_slots, d_k).normal_(0.0, 1.0 / num_slots))  # M_v

    def extend(self, kv: KeyValue, mask: Tensor) -> tuple[KeyValue, Tensor]:
        """kv (B, H, N, d_k), mask (B, 1, N) -> keys/values (B, H, N + m, d_k) with the scaled
        slots appended once per call (not per query), and the mask with the slots allowed."""
        b = kv.k.shape[0]
        slots = KeyValue((self.keys * math.sqrt(self.d_k)).expand(b, -1, -1, -1),
                         (self.values * math.sqrt(self.num_slots)).expand(b, -1, -1, -1))
        return kv.cat(slots), torch.cat([mask, mask.new_ones(b, 1, self.num_slots)], dim=-1)


class EncoderLayer(nn.Module):
    """Self-attention over regions (optionally memory-augmented) + FFN: pre-norm residual
    (``x + Sub(LN(x))``), or ``post_norm`` as the official M2 layer (``LN(x + Dropout(Sub(x)))``,
    no dropout on the attention weights, dropout on the FFN's hidden layer)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float, memory_slots: int = 0,
                 post_norm: bool = False):
        super().__init__()
        self.post_norm = post_norm
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, 0.0 if post_norm else dropout)
        self.slots = MemorySlots(memory_slots, num_heads, d_model // num_heads) if memory_slots else None
        self.ffn = FeedForward(d_model, d_ff, dropout if post_norm else 0.0)
        self.dropout = nn.Dropout(dropout)

    def _self_attention(self, h: Tensor, mask: Tensor) -> Tensor:
        kv, allowed = self.attn.project_kv(h), mask[:, None, :]
        if self.slots is not None:
            kv, allowed = self.slots.extend(kv, allowed)
        return self.attn(h, kv, allowed)[0]

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, N, D), mask (B, N) True = real region."""
        if self.post_norm:
            x = self.norm1(x + self.dropout(self._self_attention(x, mask)))
            return self.norm2(x + self.dropout(self.ffn(x)))
        x = x + self.dropout(self._self_attention(self.norm1(x), mask))
        return x + self.dropout(self.ffn(self.norm2(x)))


@ENCODERS.register("transformer")
class TransformerEncoder(nn.Module):
    """(B, N, F) features + (B, N) mask -> (B, 1, N, D) memory (one level: the last layer's
    output, normalised). ``memory_slots`` > 0 makes every self-attention memory-augmented."""

    keeps_all_levels = False
    post_norm = False  # the official M2's post-norm layers, no final LayerNorm (M2Encoder)

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 0):
        super().__init__()
        self.project = FeatureProjection(feature_dim, d_model, dropout)
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, memory_slots, self.post_norm)
                                    for _ in range(num_layers))
        self.norm = nn.Identity() if self.post_norm else nn.LayerNorm(d_model)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        x = self.project(features)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)[:, None]


@ENCODERS.register("memory_augmented")
class MemoryAugmentedEncoder(TransformerEncoder):
    """M2's encoder (SPEC.md §5): memory-augmented self-attention (40 slots per head by
    default) in every layer, and the output of *every* layer kept: (B, L, N, D), level i = the
    residual stream after layer i through its own LayerNorm (the top level through ``norm``;
    pre-norm blocks leave the stream unnormalised, where M2's post-norm layers end in one)."""

    keeps_all_levels = True

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 40):
        super().__init__(feature_dim, d_model, num_heads, num_layers, d_ff, dropout, memory_slots)
        self.level_norms = nn.ModuleList((nn.Identity() if self.post_norm else nn.LayerNorm(d_model))
                                         for _ in range(num_layers - 1))

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        x, levels = self.project(features), []
        for layer, norm in zip(self.layers, [*self.level_norms, self.norm]):
            x = layer(x, mask)
            levels.append(norm(x))
        return torch.stack(levels, dim=1)


@ENCODERS.register("m2")
class M2Encoder(MemoryAugmentedEncoder):
    """The official M2 encoder (aimagelab/meshed-memory-transformer's ``MemoryAugmentedEncoder``):
    regions projected by Linear + ReLU + Dropout + LayerNorm, then post-norm memory-augmented
    layers ``x = LN(x + Dropout(MHA(x, [x; slots])))``, ``x = LN(x + Dropout(FFN(x)))``; every
    layer's output is a level, (B, L, N, D). Initialised as the official model
    (:func:`m2_initialise`). Padded regions are masked (the official code computes its padding
    mask from the LayerNorm-ed features, whose sum is never 0, so it attends to the zero
    features of padding; docs/m2.md)."""

    post_norm = True

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 40):
        super().__init__(feature_dim, d_model, num_heads, num_layers, d_ff, dropout, memory_slots)
        m2_initialise(self)


def m2_initialise(module: nn.Module) -> None:
    """The official M2's initialisation (its ``Transformer.init_weights`` after each part's own):
    every parameter of two or more dimensions Xavier-uniform, the memory slots with the bound of
    the official (1, m, H * d_k) tensor (sqrt(6 / ((m + 1) D))), the meshed gates with their
    (D, 2D) matrices' bound (:class:`~catcap.models.cross.mix.MeshedGates` sets it) and zero
    biases; the biases of every attention projection 0, the other biases PyTorch's defaults."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("slots.keys", "slots.values")):
                heads, slots, d_k = p.shape
                bound = math.sqrt(6.0 / ((slots + 1) * heads * d_k))
                p.uniform_(-bound, bound)
            elif p.dim() > 1 and ".mix." not in f".{name}":
                nn.init.xavier_uniform_(p)
        for attention in (m for m in module.modules() if isinstance(m, MultiHeadAttention)):
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj, attention.out_proj):
                projection.bias.zero_()
