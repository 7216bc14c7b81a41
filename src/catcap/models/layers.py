"""Small building blocks shared by encoders and decoders."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from catcap.models.linear import Linear


class FeedForward(nn.Module):
    """Position-wise FFN: ``W_2 ReLU(W_1 x)``, D -> d_ff -> D.

    As in Vaswani et al., dropout is applied to the sub-layer's output by the block that uses
    it, not inside: a dropout on the (tokens x d_ff) hidden activations cost 7% of a paper-size
    training step on CPU (benchmarks/results/decode.md). ``hidden_dropout`` > 0 adds one there
    (``W_2 Dropout(ReLU(W_1 x))``, the official M2's feed-forward layer). Tokens are flattened
    to 2-D first (:func:`rows_through`), so that the in-place ReLU acts on the first Linear's
    own output.
    """

    def __init__(self, d_model: int, d_ff: int, hidden_dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(Linear(d_model, d_ff), nn.ReLU(inplace=True), Linear(d_ff, d_model))
        self.hidden_dropout = nn.Dropout(hidden_dropout) if hidden_dropout else None

    def forward(self, x: Tensor) -> Tensor:
        if self.hidden_dropout is None:
            return rows_through(self.net, x)
        return rows_through(lambda rows: self.net[2](self.hidden_dropout(self.net[1](self.net[0](rows)))), x)


def rows_through(net: nn.Module, x: Tensor) -> Tensor:
    """``net`` applied to (..., D) inputs as one (rows, D) matrix, reshaped back. A Linear on a
    3-D input returns a *view* of its 2-D result, and an in-place op on a view makes autograd
    copy, zero-fill and re-slice the whole gradient in backward: with in-place ReLUs on the
    (2500, 2048) FFN activations that cost 0.1-0.2 s of a 3.4 s paper-size step on CPU."""
    out = net(x.reshape(-1, x.shape[-1]))
    return out.view(*x.shape[:-1], out.shape[-1])


def sinusoid_table(length: int, d_model: int) -> Tensor:
    """(length, D): P[i, 2k] = sin(i / 10000^(2k/D)), P[i, 2k+1] = cos(same angle)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)[:, : d_model // 2]
    return table


class FrozenPositions(nn.Module):
    """Adds rows ``offset + 1 ..`` of a fixed (max_len + 1, D) table to (B, T, D) inputs: the
    official M2's position embedding, whose sinusoidal table its initialisation overwrites with
    Xavier-uniform values that are then never trained (row 0 is its padding position). Kept
    as a buffer, so a checkpoint carries it."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        table = torch.empty(max_len + 1, d_model)
        self.register_buffer("table", nn.init.xavier_uniform_(table))

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.shape[1]
        if offset + length + 1 > self.table.shape[0]:
            raise ValueError(f"caption position {offset + length} exceeds the position table "
                             f"({self.table.shape[0] - 1}); raise max_len")
        return x + self.table[offset + 1:offset + 1 + length]


class SinusoidalPositions(nn.Module):
    """Adds fixed sinusoidal position encodings to (B, T, D) inputs starting at ``offset``."""

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.register_buffer("table", sinusoid_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = x.shape[1]
        if offset + length > self.table.shape[0]:
            raise ValueError(f"caption position {offset + length} exceeds the position table ({self.table.shape[0]}); raise max_len")
        return x + self.table[offset:offset + length]
