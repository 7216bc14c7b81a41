"""Transformer decoder with a pluggable cross attention and an explicit, cached step.

Layer n (pre-norm residual blocks; SPEC.md §2-3):

    h = x + SelfAttn(LN(x))               masked self-attention (cache: keys/values so far)
    c = CrossAttention(h, X)              c = h + Mix(LN(h), [Attn(LN(h), X_i)]_i) — vanilla, CACA, ...
    y = c + FFN(LN(c))

The cross attention's mix decides which encoder levels X_i it reads
(:mod:`catcap.models.cross.mix`): the Transformer decoder reads the encoder's top level; the
meshed decoder (M2, :class:`MeshedDecoder`) reads every level the encoder keeps, through gates.

then a final LayerNorm and ``p_t = softmax(W_p y_t + b_p)``. Word embeddings are initialised
N(0, 1/D) and scaled by sqrt(D) (Vaswani et al.; entries of unit variance, the scale of the
sinusoidal positions added to them — PyTorch's default N(0, 1) init would make every
embedding sqrt(D) times larger than its position signal).

:class:`M2Decoder` is the official M2 decoder (aimagelab/meshed-memory-transformer): post-norm
layers ``h = LN(x + Dropout(SelfAttn(x)))``, ``c = Mix(h, [LN(h + Dropout(MHA(h, X_i)))]_i)``,
``y = LN(c + Dropout(FFN(c)))``, no final LayerNorm, unscaled word embeddings plus a frozen
position table from position 1, an output layer without bias, and the official initialisation.
Legend: B images, G hypotheses per image, T tokens.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from catcap.models.attention import MultiHeadAttention, causal_mask
from catcap.models.cross.memory import KeyValueMemory
from catcap.models.cross.mix import MeshedGates, TopLevel
from catcap.models.decoders.state import DecoderState
from catcap.models.encoders.transformer import m2_initialise
from catcap.models.layers import FeedForward, FrozenPositions, SinusoidalPositions
from catcap.models.linear import Linear
from catcap.registry import DECODERS


class DecoderLayer(nn.Module):
    """Masked self-attention, cross attention (any registered variant), FFN: pre-norm residual,
    or ``post_norm`` as the official M2 layer (``LN(x + Dropout(Sub(x)))``, no dropout on the
    self-attention weights, dropout on the FFN's hidden layer; the cross attention is built
    post-norm too)."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float, cross: nn.Module,
                 post_norm: bool = False):
        super().__init__()
        self.post_norm = post_norm
        self.norm1, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, 0.0 if post_norm else dropout)
        self.cross = cross
        self.ffn = FeedForward(d_model, d_ff, dropout if post_norm else 0.0)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, self_mask: Tensor, prepared, memory_mask: Tensor, query_mask: Tensor, group: int = 1):
        """x (R, T, D), self_mask (R, T, T), R = B * group -> (R, T, D), extras."""
        h = x if self.post_norm else self.norm1(x)
        x = self._after_self_attention(x, self.self_attn(h, self.self_attn.project_kv(h), self_mask)[0])
        c, extras = self.cross(x, prepared, memory_mask, query_mask, group)
        return self._after_ffn(c), extras

    def step(self, x: Tensor, cache: dict, prepared, memory_mask: Tensor, group: int):
        """x (B*G, 1, D) -> (B*G, 1, D), the layer's updated cache, extras."""
        h = x if self.post_norm else self.norm1(x)
        memory = cache["self"].appended(self.self_attn.project_kv(h))  # a KeyValueMemory: in place when decoding
        x = self._after_self_attention(x, self.self_attn(h, memory.keys)[0])
        c, cross_cache, extras = self.cross.step(x, prepared, memory_mask, cache["cross"], group)
        return self._after_ffn(c), {"self": memory, "cross": cross_cache}, extras

    def _after_self_attention(self, x: Tensor, attended: Tensor) -> Tensor:
        x = x + self.dropout(attended)
        return self.norm1(x) if self.post_norm else x

    def _after_ffn(self, c: Tensor) -> Tensor:
        if self.post_norm:
            return self.norm3(c + self.dropout(self.ffn(c)))
        return c + self.dropout(self.ffn(self.norm3(c)))


@DECODERS.register("transformer")
class TransformerDecoder(nn.Module):
    """Token ids -> logits (B, T, V), in parallel (teacher forcing) or step by step.

    ``make_cross(mix)`` makes one layer's cross attention around the mix the decoder chooses
    (:meth:`make_mix`); ``memory_levels`` is how many levels the encoder keeps (the meshed
    decoder reads them all, this one the top level)."""

    meshed = False  # reads every encoder level (M2) rather than the top one
    post_norm = False  # the official M2's post-norm layers and cross attention, no final LayerNorm

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int,
                 dropout: float, make_cross: Callable[[nn.Module], nn.Module], max_len: int = 128, pad_id: int = 0,
                 memory_levels: int = 1):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)  # x sqrt(D) below: unit-variance entries
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()
        self.positions = SinusoidalPositions(d_model, max_len)
        block = {"post_norm": True} if self.post_norm else {}
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, dropout,
                                                 make_cross(self.make_mix(d_model, memory_levels), **block),
                                                 self.post_norm)
                                    for _ in range(num_layers))
        self.norm = nn.Identity() if self.post_norm else nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.output = Linear(d_model, vocab_size)

    @staticmethod
    def make_mix(d_model: int, memory_levels: int) -> nn.Module:
        """The Transformer's cross attention reads the encoder's top level only."""
        return TopLevel()

    def _embed(self, tokens: Tensor, offset: int) -> Tensor:
        return self.dropout(self.positions(self.embed(tokens) * math.sqrt(self.d_model), offset))

    def prepare(self, memory: Tensor) -> list:
        """Per-layer keys/values of the encoder output (B, L, N, D) (or (B, N, D)), once per image."""
        return [layer.cross.prepare(memory) for layer in self.layers]

    def forward(self, tokens: Tensor, token_mask: Tensor, memory: Tensor, memory_mask: Tensor, group: int = 1):
        """tokens (R, T) input ids, token_mask (R, T) True = real -> logits (R, T, V), extras per
        layer. R = B * group: ``group`` captions per image of memory (B, L, N, D), image-major; the
        memory is prepared once per image and shared by its captions."""
        t = tokens.shape[1]
        self_mask = causal_mask(t, tokens.device)[None] & token_mask[:, None, :]
        self_mask = self_mask | torch.eye(t, dtype=torch.bool, device=tokens.device)[None]  # pads see themselves
        x = self._embed(tokens, 0)
        extras = []
        for layer, prepared in zip(self.layers, self.prepare(memory)):
            x, extra = layer(x, self_mask, prepared, memory_mask, token_mask, group)
            extras.append(extra)
        return self.output(self.norm(x)), extras

    def init_state(self, memory: Tensor, memory_mask: Tensor, group: int = 1) -> DecoderState:
        """A fresh state for ``group`` hypotheses per image."""
        rows = memory.shape[0] * group
        caches = [{"self": KeyValueMemory(), "cross": layer.cross.init_cache(rows)} for layer in self.layers]
        return DecoderState(self.prepare(memory), memory_mask, group, 0, caches)

    def step(self, tokens: Tensor, state: DecoderState):
        """tokens (B*G,) the previous token of every hypothesis -> logits (B*G, V), new state, extras."""
        x = self._embed(tokens[:, None], state.position)
        caches, extras = [], []
        for layer, prepared, cache in zip(self.layers, state.memory, state.caches):
            x, cache, extra = layer.step(x, cache, prepared, state.memory_mask, state.group)
            caches.append(cache)
            extras.append(extra)
        return self.output(self.norm(x))[:, 0], state.advanced(caches), extras


@DECODERS.register("meshed")
class MeshedDecoder(TransformerDecoder):
    """M2's meshed decoder (SPEC.md §5): the Transformer decoder whose cross attention, in
    every layer, attends to each of the L encoder levels and combines them with learned gates
    ``alpha_i = sigmoid(W_i [LN(q); A_i] + b_i)`` as ``sum_i alpha_i * A_i / sqrt(L)``
    (:class:`~catcap.models.cross.mix.MeshedGates`). Any cross-attention variant plugs in:
    ``vanilla`` is M2, ``caca`` M2 + CACA, ``light_caca`` M2 + LightCACA."""

    meshed = True

    @staticmethod
    def make_mix(d_model: int, memory_levels: int) -> nn.Module:
        return MeshedGates(d_model, memory_levels)


@DECODERS.register("m2")
class M2Decoder(MeshedDecoder):
    """The official M2 decoder (aimagelab/meshed-memory-transformer's ``MeshedDecoder``; module
    doc): the meshed decoder with post-norm layers and cross attention (C_i = LN(Y + MHA(Y, X_i)),
    gates on [Y; C_i], no residual around their sum), no final LayerNorm, word embeddings without
    sqrt(D) scaling or dropout plus a frozen table of ``max_len + 1`` positions (from 1), an
    output layer without bias, and the official initialisation (:func:`m2_initialise`)."""

    post_norm = True

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int,
                 dropout: float, make_cross: Callable[..., nn.Module], max_len: int = 128, pad_id: int = 0,
                 memory_levels: int = 1):
        super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, dropout, make_cross, max_len, pad_id,
                         memory_levels)
        self.positions = FrozenPositions(d_model, max_len)
        self.output = Linear(d_model, vocab_size, bias=False)
        m2_initialise(self)

    def _embed(self, tokens: Tensor, offset: int) -> Tensor:
        return self.positions(self.embed(tokens), offset)
