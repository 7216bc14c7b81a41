"""The notebook's Transformer layers: multi-head attention and sinusoidal positions.

Legend: N batch, S query length, T key/value length, E embedding width, H heads.
Dropout modules are :class:`catcap.models.legacy_dropout.SwitchableDropout`, so that with
``mml`` imported they reproduce the notebook's PyTorch 1.x numbers (see ``docs/teaching.md``).

The notebook does ``from mml.transformer_layers import *`` and then uses ``torch`` without
importing it, so ``torch`` is part of this module's star-export on purpose.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from catcap.models.legacy_dropout import SwitchableDropout

__all__ = ["MultiHeadAttention", "PositionalEncoding", "torch"]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with H heads, dropout on the attention weights.

    ``Y_h = dropout(softmax(Q_h K_h^T / sqrt(E/H))) V_h`` and ``Y = proj([Y_1; ...; Y_H])``.
    Parameters are created in the order key, query, value, proj, then the dropout ``attn_drop``
    (the order decides which random numbers the default initialisation takes).
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.1):
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"embed_dim must be a positive multiple of num_heads; found "
                             f"embed_dim={embed_dim}, num_heads={num_heads}")
        self.key = nn.Linear(embed_dim, embed_dim)
        self.query = nn.Linear(embed_dim, embed_dim)
        self.value = nn.Linear(embed_dim, embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)
        self.attn_drop = SwitchableDropout(dropout)
        self.embed_dim = embed_dim
        self.n_head = num_heads
        self.head_dim = embed_dim // num_heads

    def forward(self, query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """query (N, S, E), key/value (N, T, E) -> (N, S, E).

        ``attn_mask`` (S, T) or (N, S, T), bool or 0/1: True/1 = query i may attend to key j.
        A query row with nothing to attend to gives NaN (as softmax over -inf does).
        """
        n, s, t = self._check(query, key, value)
        q = self._heads(self.query(query), n, s)
        k = self._heads(self.key(key), n, t)
        v = self._heads(self.value(value), n, t)
        scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)   # (N, H, S, T)
        if attn_mask is not None:
            scores = scores.masked_fill(~self._mask(attn_mask, n, s, t), float("-inf"))
        weights = self.attn_drop(torch.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(n, s, self.embed_dim)
        return self.proj(y)

    def _heads(self, x: Tensor, n: int, length: int) -> Tensor:
        """(N, L, E) -> (N, H, L, E/H)."""
        return x.view(n, length, self.n_head, self.head_dim).transpose(1, 2)

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[int, int, int]:
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != 3 or x.shape[-1] != self.embed_dim:
                raise ValueError(f"MultiHeadAttention expects {name} of shape (N, L, {self.embed_dim}), "
                                 f"found {tuple(x.shape)}; add a batch dimension with x.unsqueeze(0) "
                                 "or check embed_dim")
        if key.shape != value.shape or key.shape[0] != query.shape[0]:
            raise ValueError(f"key and value must have one shape (N, T, E) with the query's N; found "
                             f"query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
        return query.shape[0], query.shape[1], key.shape[1]

    @staticmethod
    def _mask(mask: Tensor, n: int, s: int, t: int) -> Tensor:
        """(S, T) or (N, S, T), True/1 = may attend -> bool broadcastable to (N, H, S, T)."""
        if mask.shape == (s, t):
            return mask.bool()
        if mask.shape == (n, s, t):
            return mask.bool().unsqueeze(1)
        raise ValueError(f"attn_mask must have shape (S, T) = ({s}, {t}) or (N, S, T) = ({n}, {s}, {t}), "
                         f"found {tuple(mask.shape)}")


def sinusoid_table(max_len: int, embed_dim: int) -> Tensor:
    """(1, max_len, E): ``P[i, 2k] = sin(i * 10000^(-2k/E))``, ``P[i, 2k+1] = cos(same angle)``."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    rate = 10000.0 ** (-torch.arange(0, embed_dim, 2, dtype=torch.float64) / embed_dim)
    table = torch.zeros(1, max_len, embed_dim, dtype=torch.float64)
    table[0, :, 0::2] = torch.sin(position * rate)
    table[0, :, 1::2] = torch.cos(position * rate)
    return table.float()


class PositionalEncoding(nn.Module):
    """``dropout(x + P[:, :S])`` for x (N, S, E), P the fixed sinusoid table (buffer ``pe``)."""

    def __init__(self, embed_dim: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        if embed_dim < 2 or embed_dim % 2:
            raise ValueError(f"PositionalEncoding needs an even embed_dim (sin/cos pairs), found {embed_dim}")
        self.dropout = SwitchableDropout(p=dropout)
        self.register_buffer("pe", sinusoid_table(max_len, embed_dim))

    def forward(self, x: Tensor) -> Tensor:
        """(N, S, E) -> (N, S, E)."""
        if x.dim() != 3 or x.shape[-1] != self.pe.shape[-1]:
            raise ValueError(f"PositionalEncoding expects (N, S, {self.pe.shape[-1]}), found {tuple(x.shape)}")
        if x.shape[1] > self.pe.shape[1]:
            raise ValueError(f"sequence length {x.shape[1]} exceeds max_len={self.pe.shape[1]}; "
                             "build the layer (or the model's max_length) larger")
        return self.dropout(x + self.pe[:, : x.shape[1]])
