"""``CaptioningTransformer``: image feature -> caption scores with a post-norm decoder.

Legend: N batch, D image feature width, W word-vector width, T caption length, V vocabulary.
Attribute names follow the course (students' code and saved weights refer to them):
``visual_projection``, ``embedding``, ``positional_encoding``, ``transformer.layers[i]``
(``self_attn``, ``multihead_attn``, ``linear1``, ``dropout``, ``linear2``, ``norm1..3``,
``dropout1..3``) and ``output``.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor, nn

from catcap.models.legacy_dropout import SwitchableDropout
from mml.transformer_layers import MultiHeadAttention, PositionalEncoding

__all__ = ["CaptioningTransformer", "TransformerDecoder", "TransformerDecoderLayer"]


class TransformerDecoderLayer(nn.Module):
    """Post-norm decoder layer: self attention, attention to the image, feed-forward.

    ``x = norm1(x + dropout1(self_attn(x)))``; ``x = norm2(x + dropout2(multihead_attn(x, m)))``;
    ``x = norm3(x + dropout3(linear2(dropout(relu(linear1(x))))))``.
    """

    def __init__(self, input_dim: int, num_heads: int, dim_feedforward: int = 2048, dropout: float = 0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(input_dim, num_heads, dropout)
        self.multihead_attn = MultiHeadAttention(input_dim, num_heads, dropout)
        self.linear1 = nn.Linear(input_dim, dim_feedforward)
        self.dropout = SwitchableDropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, input_dim)
        self.norm1 = nn.LayerNorm(input_dim)
        self.norm2 = nn.LayerNorm(input_dim)
        self.norm3 = nn.LayerNorm(input_dim)
        self.dropout1 = SwitchableDropout(dropout)
        self.dropout2 = SwitchableDropout(dropout)
        self.dropout3 = SwitchableDropout(dropout)
        self.activation = nn.ReLU()

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None) -> Tensor:
        """tgt (N, T, W), memory (N, M, W) (here M = 1 image token), tgt_mask (T, T) -> (N, T, W)."""
        x = self.norm1(tgt + self.dropout1(self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask)))
        x = self.norm2(x + self.dropout2(self.multihead_attn(x, memory, memory)))
        hidden = self.dropout(self.activation(self.linear1(x)))
        return self.norm3(x + self.dropout3(self.linear2(hidden)))


class TransformerDecoder(nn.Module):
    """``num_layers`` deep copies of one built layer, applied in turn (``layers``)."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList(copy.deepcopy(decoder_layer) for _ in range(num_layers))
        self.num_layers = num_layers

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None) -> Tensor:
        """tgt (N, T, W), memory (N, M, W) -> (N, T, W)."""
        for layer in self.layers:
            tgt = layer(tgt, memory, tgt_mask=tgt_mask)
        return tgt


class CaptioningTransformer(nn.Module):
    """Teacher-forced scores and greedy sampling; the image is one memory token.

    Construction order (it decides which random numbers the initialisation takes):
    ``visual_projection``, ``embedding`` (padding at ``<NULL>``), ``positional_encoding``,
    the decoder; then every Linear/Embedding weight ~ N(0, 0.02), biases 0, LayerNorm 1/0;
    only then the ``output`` Linear (default PyTorch init).
    """

    def __init__(self, word_to_idx: dict, input_dim: int, wordvec_dim: int, num_heads: int = 4,
                 num_layers: int = 2, max_length: int = 50):
        super().__init__()
        if "<NULL>" not in word_to_idx:
            raise ValueError("word_to_idx needs a '<NULL>' (padding) entry; found the words "
                             f"{sorted(word_to_idx)[:8]}...")
        vocab_size = len(word_to_idx)
        self.vocab_size = vocab_size
        self._null = word_to_idx["<NULL>"]
        self._start = word_to_idx.get("<START>")
        self._end = word_to_idx.get("<END>")
        self.input_dim, self.max_length = input_dim, max_length

        self.visual_projection = nn.Linear(input_dim, wordvec_dim)
        self.embedding = nn.Embedding(vocab_size, wordvec_dim, padding_idx=self._null)
        self.positional_encoding = PositionalEncoding(wordvec_dim, max_len=max_length)
        layer = TransformerDecoderLayer(input_dim=wordvec_dim, num_heads=num_heads)
        self.transformer = TransformerDecoder(layer, num_layers=num_layers)
        self.apply(_init_weights)
        self.output = nn.Linear(wordvec_dim, vocab_size)

    def forward(self, features: Tensor, captions: Tensor) -> Tensor:
        """features (N, D), captions (N, T) word ids -> scores (N, T, V).

        Position t sees the image and caption words 0..t (causal self-attention).
        """
        features, captions = self._check(features, captions)
        t = captions.shape[1]
        words = self.positional_encoding(self.embedding(captions))            # (N, T, W)
        image = self.visual_projection(features).unsqueeze(1)                  # (N, 1, W)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=captions.device))
        return self.output(self.transformer(words, image, tgt_mask=causal))

    def sample(self, features, max_length: int = 30) -> np.ndarray:
        """Greedy captions for features (N, D) (array or tensor) -> int32 (N, max_length).

        Starts from ``<START>``; positions after ``<END>`` hold whatever follows (use
        ``decode_captions``, which stops at ``<END>``). Runs in eval mode (no dropout) and
        restores the module's mode afterwards.
        """
        if self._start is None:
            raise ValueError("sample() needs a '<START>' word in word_to_idx to begin captions")
        if max_length > self.max_length:
            raise ValueError(f"max_length={max_length} exceeds the model's max_length={self.max_length}")
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                return self._greedy(torch.as_tensor(np.asarray(features)), max_length)
        finally:
            self.train(was_training)

    def _greedy(self, features: Tensor, max_length: int) -> np.ndarray:
        n = features.shape[0]
        words = torch.full((n, 1), self._start, dtype=torch.long)
        captions = np.full((n, max_length), self._null, dtype=np.int32)
        for t in range(max_length):
            best = self.forward(features, words)[:, -1].argmax(dim=1)           # (N,)
            captions[:, t] = best.numpy()
            words = torch.cat([words, best[:, None]], dim=1)
        return captions

    def _check(self, features, captions) -> tuple[Tensor, Tensor]:
        features = torch.as_tensor(features).to(self.visual_projection.weight.dtype)
        captions = torch.as_tensor(captions)
        if features.dim() != 2 or features.shape[1] != self.input_dim:
            raise ValueError(f"features must be (N, {self.input_dim}), found {tuple(features.shape)}")
        if captions.dim() != 2 or captions.shape[0] != features.shape[0]:
            raise ValueError(f"captions must be (N, T) word ids with N = {features.shape[0]}, found "
                             f"{tuple(captions.shape)}")
        if captions.dtype.is_floating_point:
            raise ValueError(f"captions must hold integer word ids, found dtype {captions.dtype}")
        if captions.shape[1] > self.max_length:
            raise ValueError(f"captions have {captions.shape[1]} positions, the model at most "
                             f"max_length={self.max_length}; build it with a larger max_length")
        return features, captions.long()


def _init_weights(module: nn.Module) -> None:
    """Linear/Embedding weights ~ N(0, 0.02) and Linear biases 0; LayerNorm weight 1, bias 0."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        module.weight.data.normal_(mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            module.bias.data.zero_()
    elif isinstance(module, nn.LayerNorm):
        module.bias.data.zero_()
        module.weight.data.fill_(1.0)
