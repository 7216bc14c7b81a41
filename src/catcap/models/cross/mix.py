"""How a cross attention combines what it read from each encoder level (SPEC.md §5, M2).

Every cross-attention variant attends its query to the top ``levels`` levels of the encoder
memory (the same query and the same attention weights for every level, see "level-heads" in
:mod:`catcap.models.attention`) and hands the per-level results ``A_i`` (R, L, T, D) to its
mix, which returns the sub-layer's branch (R, T, D); the variant adds the residual:
``c = q + Dropout(Mix(LN(q), A))``.

- :class:`TopLevel` (the Transformer decoder): one level, the encoder's last; ``Mix = A_1``.
- :class:`MeshedGates` (M2's meshed decoder): every level the encoder keeps, gated

      alpha_i = sigmoid(W_i [LN(q); A_i] + b_i),    Mix = sum_i alpha_i * A_i / sqrt(L)

  with ``W_i`` a (D, 2D) matrix per level, split as ``[W_i^q, W_i^c]`` so that the query's
  part of all L gates is one product.

Pre-norm note: the official M2 decoder is post-norm, so its ``C(Y, X_i)`` already contains a
residual and a LayerNorm (``LN(Y + MHA(Y, X_i))``) and its gate reads the normalised ``Y``. In
catcap's pre-norm blocks the gate reads the normalised query ``LN(q)`` and the attention branch
``A_i``, and one residual goes around the gated sum (docs/m2.md). Legend: R rows, L levels,
T positions, D width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from catcap.models.linear import Linear


def top_levels(memory: Tensor, levels: int) -> Tensor:
    """Encoder memory (B, N, D) (one level) or (B, L', N, D) -> its top ``levels`` levels
    (B, levels, N, D) (a view)."""
    if memory.dim() == 3:
        memory = memory[:, None]
    if memory.dim() != 4 or memory.shape[1] < levels:
        raise ValueError(f"the cross attention reads {levels} encoder level(s), but the memory has shape "
                         f"{tuple(memory.shape)}; expected (B, L, N, D) with L >= {levels} (from an encoder that keeps "
                         "that many levels, e.g. model.encoder=memory_augmented)")
    return memory[:, memory.shape[1] - levels:]


class TopLevel(nn.Module):
    """One level (the encoder's top one): the mix is the attention output itself."""

    levels = 1

    def forward(self, query: Tensor, attended: Tensor) -> Tensor:
        """query (R, T, D) (unused), attended (R, 1, T, D) -> (R, T, D)."""
        return attended[:, 0]


class MeshedGates(nn.Module):
    """M2's meshed connectivity over ``levels`` encoder levels (see module doc)."""

    def __init__(self, d_model: int, levels: int):
        super().__init__()
        if levels < 1:
            raise ValueError(f"meshed gates need at least one encoder level, got {levels}")
        self.levels, self.d_model = levels, d_model
        self.query = Linear(d_model, levels * d_model)  # [W_1^q; ..; W_L^q] and the biases b_i
        self.context = nn.ModuleList(Linear(d_model, d_model, bias=False) for _ in range(levels))  # W_i^c
        bound = math.sqrt(6.0 / (3 * d_model))  # Xavier-uniform of each (D, 2D) gate matrix, biases 0 (as M2)
        with torch.no_grad():
            for weight in [self.query.weight] + [c.weight for c in self.context]:
                weight.uniform_(-bound, bound)
            self.query.bias.zero_()

    def gates(self, query: Tensor, attended: Tensor) -> Tensor:
        """query (R, T, D) = LN(q), attended (R, L, T, D) -> alpha (R, L, T, D) in (0, 1)."""
        r, levels, t, d = attended.shape
        if levels != self.levels:
            raise ValueError(f"meshed gates were built for {self.levels} levels, got {levels}")
        from_query = self.query(query).view(r, t, levels, d).transpose(1, 2)
        from_context = torch.stack([w(attended[:, i]) for i, w in enumerate(self.context)], dim=1)
        return torch.sigmoid(from_query + from_context)

    def forward(self, query: Tensor, attended: Tensor) -> Tensor:
        """query (R, T, D), attended (R, L, T, D) -> sum_i alpha_i * A_i / sqrt(L), (R, T, D)."""
        return (self.gates(query, attended) * attended).sum(dim=1) / math.sqrt(self.levels)
