"""The unified vision-language model (VLP, Zhou et al. 2020; SPEC.md §5), on the decoder contract.

One shared Transformer reads ``[CLS] r_1..r_N [SEP] w_1..w_T [STOP]`` under a self-attention mask
(:func:`vlp_attention_mask`): *bidirectional* (every position sees every real position) or
*seq2seq* (the image part ``[CLS] r [SEP]`` sees the image part; word t sees the image part and
words <= t). Blocks are pre-norm (``x + MHA(LN x)``, ``x + FFN(LN x)``) with a final LayerNorm,
as catcap's other Transformers; inputs are the sum of a token embedding (a word, or the learned
[CLS], [SEP], [MASK] vectors, or a region embedding ``r_i``, :class:`VLPRegions`), a segment embedding (image 0,
text 1) and, for text, a learned position (word t at position t; regions carry no 1-D position).
[STOP] is catcap's ``<eos>``; [MASK] is not a vocabulary word, so the output vocabulary is the
captioner's.

**Captioning as a decoder.** Under the seq2seq mask the image part never sees a word, so its
states at every layer depend on the image alone: ``prepare`` runs it once per image and keeps
each layer's keys and values of the image positions (B, H, N + 2, d_k), shared by the image's
hypotheses (the decoder's "memory"). Generation appends [MASK] after the words so far and
predicts it (VLP's rule): at step t the previous word w_{t-1} enters at position t - 1 (its keys
and values are cached per layer, reordered by beam search) and a [MASK] at position t, which sees
the image, the words < t and itself, gives the logits of w_t. Teacher forcing computes the same
in one pass over ``[w_1..w_{T-1}; [MASK]_1..[MASK]_T]`` (word s sees words <= s; [MASK]_t sees
words < t and itself), so every caption word is predicted from its [MASK], exactly as at
generation time: the seq2seq fine-tuning objective with all words predicted (VLP fine-tunes by
masking words inline; this form gives training what decoding does). <bos> is the empty prefix.

Attention to the image block (per image) and the text block (per hypothesis) is one softmax
computed block-wise (:func:`~catcap.models.cross.history.attend_with_history`), so the image
keys are never copied per hypothesis. Legend: B images, G hypotheses per image, R = B * G rows,
N regions, T words, D width, H heads, d_k = D / H, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from catcap.data.geometry import GEOMETRY_DIM
from catcap.models.attention import KeyValue, MultiHeadAttention, attend
from catcap.models.cross.history import attend_with_history
from catcap.models.decoders.state import DecoderState
from catcap.models.layers import FeedForward, rows_through
from catcap.models.linear import Linear
from catcap.registry import DECODERS, ENCODERS

MASK_KINDS = ("bidirectional", "seq2seq")
#: the id that stands for [MASK] in a text input (it is not a vocabulary word)
MASK_ID = -1


def vlp_attention_mask(image_mask: Tensor, text_mask: Tensor, kind: str) -> Tensor:
    """image_mask (B, I) over ``[CLS] r_1..r_N [SEP]``, text_mask (B, T) over the words, True =
    real -> (B, I + T, I + T) bool, True where query position i may attend key position j.

    ``bidirectional``: every real position; ``seq2seq``: image queries see real image positions,
    word t sees real image positions and real words <= t. A padded query sees itself only, so
    that no row is empty (its output is never used)."""
    if kind not in MASK_KINDS:
        raise ValueError(f"VLP attention mask must be one of {', '.join(MASK_KINDS)}, got {kind!r}")
    b, i, t = image_mask.shape[0], image_mask.shape[1], text_mask.shape[1]
    real = torch.cat([image_mask, text_mask], 1)  # (B, I + T)
    allowed = real[:, None, :].expand(b, i + t, i + t).clone()
    if kind == "seq2seq":
        allowed[:, :i, i:] = False  # the image part never sees words
        future = torch.ones(t, t, dtype=torch.bool, device=real.device).triu(1)
        allowed[:, i:, i:] &= ~future  # word t sees words <= t
    eye = torch.eye(i + t, dtype=torch.bool, device=real.device)[None]
    return torch.where(real[:, :, None], allowed, eye)


class VLPLayer(nn.Module):
    """``x + Dropout(MHA(LN x))``, then ``x + Dropout(FFN(LN x))``."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)

    @property
    def _p(self) -> float:
        return self.attn.dropout if self.training else 0.0

    def keys_values(self, x: Tensor) -> tuple[Tensor, KeyValue]:
        """x (B, L, D) -> LN(x) and its keys/values (B, H, L, d_k)."""
        h = self.norm1(x)
        return h, self.attn.project_kv(h)

    def forward(self, x: Tensor, mask: Tensor, h_kv: tuple[Tensor, KeyValue] | None = None) -> Tensor:
        """Self-attention over one sequence: x (B, L, D), mask (B, L, L) -> (B, L, D);
        ``h_kv``: :meth:`keys_values` of x when the caller already has them."""
        h, kv = self.keys_values(x) if h_kv is None else h_kv
        heads, _ = attend(self.attn.project_q(h), kv.k, kv.v, mask, self._p)
        return self._finish(x, heads)

    def attend_split(self, x: Tensor, h: Tensor, image: KeyValue, image_mask: Tensor, text: KeyValue,
                     text_mask: Tensor, group: int) -> Tensor:
        """Text queries x (R, Q, D) (LN-ed h) over the image block of their image (B, H, I, d_k),
        image_mask (B, I), and their own text keys (R, H, M, d_k), text_mask (R | 1, Q, M)."""
        out = attend_with_history(self.attn.project_q(h), image, image_mask, text, text_mask[:, None], group, self._p)
        return self._finish(x, out.heads)

    def _finish(self, x: Tensor, heads: Tensor) -> Tensor:
        x = x + self.dropout(self.attn.merge(heads))
        return x + self.dropout(self.ffn(self.norm2(x)))


@dataclass
class VLPImage:
    """The image part prepared once per image: each layer's keys/values (B, H, I, d_k) of
    ``[CLS] r [SEP]`` (I = N + 2), their mask (B, I), and the final states (B, I, D)."""

    layers: list
    mask: Tensor
    states: Tensor


@ENCODERS.register("vlp_regions")
class VLPRegions(nn.Module):
    """Region inputs (B, N, F [+ 5]) -> region embeddings (B, 1, N, D):
    ``r_i = W_r R_i + W_p [LN(W_c C_i) | LN(W_g G_i)]`` (VLP's region embedding, SPEC.md §5).

    ``region_geometry``: the last 5 input columns are ``G_i`` (box corners and area, appended by
    :mod:`catcap.data.geometry`). ``region_classes``: the name of the catcap image encoder whose
    frozen ImageNet head gives ``C_i = softmax(W_in R_i + b_in)`` per grid cell (1,000 classes;
    kept as buffers, so a checkpoint carries them). With neither, ``r_i = W_r R_i``; with one,
    ``W_p`` reads that term alone."""

    keeps_all_levels = False
    embeds_region_terms = True
    uses_layers = False  # model.encoder_layers is not read: the shared layers are the decoder's

    def __init__(self, feature_dim: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 memory_slots: int = 0, region_geometry: bool = False, region_classes: str | None = None):
        super().__init__()
        if memory_slots:
            raise ValueError(f"the VLPRegions encoder takes no memory slots (found model.memory_slots={memory_slots}); "
                             "leave model.memory_slots unset")
        self.feature_dim = feature_dim
        self.project = Linear(feature_dim, d_model)  # W_r
        self.classes = self._class_term(region_classes, feature_dim, d_model) if region_classes else None
        self.geometry = nn.Sequential(Linear(GEOMETRY_DIM, d_model), nn.LayerNorm(d_model)) if region_geometry else None
        terms = (self.classes is not None) + (self.geometry is not None)
        self.mix = Linear(terms * d_model, d_model) if terms else None  # W_p

    def _class_term(self, encoder: str, feature_dim: int, d_model: int) -> nn.Module:
        from catcap.features.efficientnet import imagenet_head

        weight, bias = imagenet_head(encoder)
        if weight.shape[1] != feature_dim:
            raise ValueError(f"model.region_classes={encoder!r} classifies {weight.shape[1]}-d grid cells, but the "
                             f"features are {feature_dim}-d; name the encoder that extracted them")
        self.register_buffer("class_weight", weight)  # (K, F), frozen
        self.register_buffer("class_bias", bias)
        return nn.Sequential(Linear(weight.shape[0], d_model), nn.LayerNorm(d_model))  # LN(W_c C)

    def class_probabilities(self, regions: Tensor) -> Tensor:
        """regions (B, N, F) -> C (B, N, K): the image encoder's ImageNet head on each cell."""
        return torch.softmax(regions @ self.class_weight.T + self.class_bias, dim=-1)

    def forward(self, features: Tensor, mask: Tensor) -> Tensor:
        regions = features[..., :self.feature_dim]
        out = rows_through(self.project, regions)
        terms = []
        if self.classes is not None:
            terms.append(self.classes(self.class_probabilities(regions)))
        if self.geometry is not None:
            terms.append(self.geometry(features[..., self.feature_dim:]))
        if terms:
            out = out + self.mix(torch.cat(terms, -1))
        return out[:, None]


@DECODERS.register("vlp")
class VLPDecoder(nn.Module):
    """The shared Transformer as a caption decoder (see module doc); ``num_layers`` shared layers.
    ``make_cross`` is not used: VLP has no cross attention (``model.cross_attention`` must be vanilla)."""

    meshed = False
    uses_cross_attention = False

    def __init__(self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float,
                 make_cross=None, max_len: int = 64, pad_id: int = 0, memory_levels: int = 1):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.special = nn.Parameter(torch.randn(3, d_model) * 0.02)  # [CLS], [SEP], [MASK]
        self.segments = nn.Parameter(torch.randn(2, d_model) * 0.02)  # image, text
        self.positions = nn.Embedding(max_len + 1, d_model)  # text positions 1..max_len
        self.input_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(VLPLayer(d_model, num_heads, d_ff, dropout) for _ in range(num_layers))
        self.norm = nn.LayerNorm(d_model)
        self.output = Linear(d_model, vocab_size)

    # inputs ----------------------------------------------------------------------------------
    def image_inputs(self, regions: Tensor, region_mask: Tensor) -> tuple[Tensor, Tensor]:
        """regions (B, N, D) -> ``[CLS] r [SEP]`` inputs (B, N + 2, D) and mask (B, N + 2)."""
        b = regions.shape[0]
        cls, sep = (self.special[k].expand(b, 1, -1) for k in (0, 1))
        x = torch.cat([cls, regions, sep], 1) + self.segments[0]
        ones = region_mask.new_ones(b, 1)
        return self.dropout(self.input_norm(x)), torch.cat([ones, region_mask, ones], 1)

    def text_inputs(self, tokens: Tensor | None, positions: Tensor) -> Tensor:
        """Words (R, Q) (None: [MASK]s) at text positions (Q,) -> (R | 1, Q, D)."""
        token = self.special[2][None, None] if tokens is None else self.embed(tokens)
        return self._text(token, positions)

    def _text(self, token: Tensor, positions: Tensor) -> Tensor:
        """Token vectors (R | 1, Q, D) at text positions (Q,) -> inputs (segment, position, LN, dropout)."""
        return self.dropout(self.input_norm(token + self.positions(positions) + self.segments[1]))

    # masked-token prediction (pre-training) --------------------------------------------------
    def joint_states(self, memory: Tensor, memory_mask: Tensor, tokens: Tensor, token_mask: Tensor,
                     kind: str) -> Tensor:
        """The whole sequence ``[CLS] r [SEP] w_1..w_T`` through every layer under the ``kind``
        mask: memory (B, L, N, D) or (B, N, D) regions with mask (B, N), tokens (B, T) words at
        positions 1..T (``MASK_ID`` where masked), token_mask (B, T) True = real -> the final
        (LayerNorm-ed) states (B, N + 2 + T, D); [CLS] is position 0, [SEP] position N + 1."""
        regions = memory[:, -1] if memory.dim() == 4 else memory
        image, image_mask = self.image_inputs(regions, memory_mask)
        t = tokens.shape[1]
        masked = tokens == MASK_ID  # [MASK] is not a vocabulary word: its own vector
        token = torch.where(masked[..., None], self.special[2], self.embed(tokens.masked_fill(masked, 0)))
        x = torch.cat([image, self._text(token, torch.arange(1, t + 1, device=tokens.device))], 1)
        allowed = vlp_attention_mask(image_mask, token_mask, kind)
        for layer in self.layers:
            x = layer(x, allowed)
        return self.norm(x)

    def masked_lm(self, memory: Tensor, memory_mask: Tensor, tokens: Tensor, token_mask: Tensor, kind: str) -> Tensor:
        """:meth:`joint_states` -> logits (B, T, V) at every word position."""
        states = self.joint_states(memory, memory_mask, tokens, token_mask, kind)
        return self.output(states[:, states.shape[1] - tokens.shape[1]:])

    # the image part, once per image -----------------------------------------------------------
    def prepare(self, memory: Tensor, memory_mask: Tensor) -> VLPImage:
        """memory (B, L, N, D) (the top level is read) or (B, N, D), mask (B, N) -> the image part
        through every layer under the seq2seq mask (the image sees only itself)."""
        regions = memory[:, -1] if memory.dim() == 4 else memory
        x, mask = self.image_inputs(regions, memory_mask)
        allowed = vlp_attention_mask(mask, mask[:, :0], "seq2seq")
        layers = []
        for layer in self.layers:
            h_kv = layer.keys_values(x)
            layers.append(h_kv[1])
            x = layer(x, allowed, h_kv)
        return VLPImage(layers, mask, x)

    # teacher forcing ------------------------------------------------------------------------
    def forward(self, tokens: Tensor, token_mask: Tensor, memory: Tensor, memory_mask: Tensor, group: int = 1):
        """tokens (R, T) = ``<bos> w_1 .. w_{T-1}`` -> logits (R, T, V) of w_1..w_T, each from its
        [MASK] (see module doc), extras (one empty dict per layer)."""
        image = self.prepare(memory, memory_mask)
        r, t = tokens.shape
        positions = torch.arange(1, t + 1, device=tokens.device)
        words = self.text_inputs(tokens[:, 1:], positions[:-1])  # w_s at position s, s < T
        masks = self.text_inputs(None, positions).expand(r, -1, -1)  # [MASK]_t at position t
        x = torch.cat([words, masks], 1)  # (R, 2T - 1, D)
        mask = self._teacher_mask(t, tokens.device)
        for layer, kv in zip(self.layers, image.layers):
            h, own = layer.keys_values(x)
            x = layer.attend_split(x, h, kv, image.mask, own, mask, group)
        return self.output(self.norm(x[:, t - 1:])), [{} for _ in self.layers]

    @staticmethod
    def _teacher_mask(t: int, device) -> Tensor:
        """(1, 2T - 1, 2T - 1) over [w_1..w_{T-1}; [MASK]_1..[MASK]_T]: w_s sees w_<=s;
        [MASK]_t sees w_<t and itself. Padded words need no mask: captions are padded at the end,
        so only later (unused) positions read them."""
        words = torch.ones(t - 1, t - 1, dtype=torch.bool, device=device).tril()
        before = torch.ones(t, t - 1, dtype=torch.bool, device=device).tril(-1)  # [MASK]_t sees w_s, s < t
        top = torch.cat([words, torch.zeros(t - 1, t, dtype=torch.bool, device=device)], 1)
        bottom = torch.cat([before, torch.eye(t, dtype=torch.bool, device=device)], 1)
        return torch.cat([top, bottom], 0)[None]

    # cached generation ------------------------------------------------------------------------
    def init_state(self, memory: Tensor, memory_mask: Tensor, group: int = 1) -> DecoderState:
        """The image part prepared once; an empty text cache per layer for ``group`` hypotheses."""
        return DecoderState(self.prepare(memory, memory_mask), memory_mask, group, 0, [None for _ in self.layers])

    def step(self, tokens: Tensor, state: DecoderState):
        """tokens (R,) the previous word (``<bos>`` at the first step: no word) -> logits (R, V)
        of the [MASK] after it, the state with the word's keys/values cached, extras."""
        p, r = state.position, tokens.shape[0]
        if p + 1 > self.max_len:  # text positions 1..max_len
            raise ValueError(f"VLP decodes at most model.max_len={self.max_len} words; raise model.max_len")
        device = tokens.device
        mask_in = self.text_inputs(None, torch.full((1,), p + 1, device=device)).expand(r, -1, -1)  # no host copy
        x = mask_in if p == 0 else torch.cat([self.text_inputs(tokens[:, None], torch.full((1,), p, device=device)),
                                              mask_in], 1)
        q = x.shape[1]
        image, caches = state.memory, []
        for layer, kv, cache in zip(self.layers, image.layers, state.caches):
            h, own = layer.keys_values(x)
            keys = own if cache is None else cache.cat(own)  # [words < p; w_p; [MASK]]
            m = keys.length
            # w_p (when q == 2) sees all but the [MASK] after it; the [MASK] sees all (no host copy)
            seen = torch.ones(q, m, dtype=torch.bool, device=device).tril(m - q)
            x = layer.attend_split(x, h, kv, image.mask, keys, seen[None], state.group)
            # words <= p stay (a view: the next step's append copies them once); the [MASK] goes
            caches.append(None if p == 0 else KeyValue(keys.k[:, :, :m - 1], keys.v[:, :, :m - 1]))
        return self.output(self.norm(x[:, -1])), state.advanced(caches), [{} for _ in self.layers]
