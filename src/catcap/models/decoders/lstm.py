"""Recurrent captioners: Att2in, Up-Down (BUTD) and Look-Back, on the decoder contract of
:mod:`catcap.models.caption_model` (SPEC.md §3, §5).

Every one embeds the previous word ``x_t = Dropout(ReLU(W_e w_t))``, runs its LSTM core with
soft attention over the regions (:mod:`catcap.models.cross.soft`: vanilla, CACA or LightCACA,
by ``model.cross_attention``) and predicts ``p_t = softmax(W_p Dropout(h_t))``:

- **Att2in** (Rennie et al. 2017): attention with the previous hidden state as query; the
  context enters the LSTM's cell input only, ``g = tanh(W_gx x_t + W_gh h_{t-1} + W_gc c_t)``,
  or with ``maxout`` (``model.rnn.maxout``, the paper's and self-critical.pytorch's Att2in2) a
  two-piece max-out of the same sum in place of the tanh.
- **Up-Down** (Anderson et al. 2018): an attention LSTM over ``[h_lang_{t-1}; v_bar; x_t]``
  whose hidden state queries the regions, and a language LSTM over ``[c_t; h_att_t]``. The
  image vector v_bar is the mean of the embedded regions, or with ``pooled_embedding``
  (``model.rnn.pooled_embedding``, as the anchors) the mean region feature embedded by its own
  layer, ``Dropout(ReLU(W_f mean_i R_i + b_f))``: the encoder then gives ``W_f R_i + b_f`` per
  region as a level below the embedded regions (:class:`~catcap.models.encoders.embed.RegionEmbedding`).
- **Look-Back** (Qin et al. 2019): Up-Down whose attention query also carries the previous
  step's context, ``W_h h_att_t + W_c c_{t-1}``.

The LSTM states (h, c), Look-Back's previous context and the attention's history memory are
the decoder state's caches, reordered by beam search like every other cache. Teacher forcing
runs the same step in a loop (an LSTM cannot be parallel over time), so cached decoding and
training compute the same thing. Caption padding is trailing, so a padded position is only
ever read by later padded positions: ``token_mask`` is not needed. The mean region feature and
its gate projection are computed once per image. Extras: one "layer" with one "head" (AWC's
N_layers = H = 1): ``history_weight`` (R, 1, T), ``region_attention`` (R, 1, T, N) and
``history_attention`` (R, 1, T, T) zero-padded over entries not yet written.
Legend: B images, G hypotheses per image, R = B * G rows, T steps, N regions, D width of
regions and LSTM states (the rnn size), E word embedding width, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from catcap.models.cross.soft import SoftRegions
from catcap.models.decoders.state import DecoderState
from catcap.models.linear import Linear
from catcap.registry import DECODERS


class LSTMCell(nn.Module):
    """``h, c = LSTM(x, h, c)``, gates i, f, g, o from ``W_x x + W_h h + b``, plus optional
    per-image gate inputs (B, 4H) shared by an image's G rows, and an optional extra cell input
    added to g's pre-activation (Att2in). ``maxout``: g has two pieces, (R, 2H), and the cell
    takes their element-wise maximum instead of tanh(g) (Att2in2). Initialised as
    ``nn.LSTMCell``: U(+-1/sqrt(H))."""

    def __init__(self, input_size: int, hidden: int, maxout: bool = False):
        super().__init__()
        self.widths = [hidden, hidden, 2 * hidden if maxout else hidden, hidden]  # i, f, g, o
        self.input = Linear(input_size, sum(self.widths))
        self.hidden = Linear(hidden, sum(self.widths), bias=False)
        self.maxout = maxout
        bound = 1 / math.sqrt(hidden)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: Tensor, h: Tensor, c: Tensor, per_image: Tensor | None = None,
                cell_input: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (R, I), h and c (R, H) -> new h, c."""
        gates = self.input(x) + self.hidden(h)
        if per_image is not None:
            gates = (gates.view(per_image.shape[0], -1, gates.shape[1]) + per_image[:, None]).view(gates.shape)
        i, f, g, o = gates.split(self.widths, 1) if self.maxout else gates.chunk(4, 1)
        if cell_input is not None:
            g = g + cell_input
        g = torch.maximum(*g.chunk(2, 1)) if self.maxout else torch.tanh(g)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * g
        return torch.sigmoid(o) * torch.tanh(c), c


@dataclass
class RecurrentMemory:
    """Per-image prepared memory: the attention's regions, and per-image gate inputs of the
    first LSTM (Up-Down's ``W mean(V)``, (B, 4D); None for Att2in)."""

    regions: SoftRegions
    per_image: Tensor | None = None


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """values (B, N, D), mask (B, N) True = real -> mean over the real regions (B, D)."""
    total = values.masked_fill(~mask[..., None], 0.0).sum(1)
    return total / mask.sum(1, keepdim=True).clamp(min=1).to(values.dtype)


def stack_steps(extras: list[dict]) -> dict:
    """Per-step extras (one layer of H heads, T = 1; see :mod:`catcap.models.cross.soft`) -> the
    layer's extras over T steps, history entries not yet written at zero weight; {} for vanilla
    attention."""
    if not extras or not extras[0]:
        return {}
    t, a = len(extras), torch.cat([e["history_weight"] for e in extras], 2)  # (R, H, T)
    regions = [e["region_attention"] for e in extras]  # None throughout for OHC

    def padded(h):  # (R, H, 1, m) -> (R, H, 1, T); IHC's first step has no entries
        return a.new_zeros(*a.shape[:2], 1, t) if h is None else F.pad(h, (0, t - h.shape[-1]))

    return {"history_weight": a, "region_attention": None if regions[0] is None else torch.cat(regions, 2),
            "history_attention": torch.cat([padded(e["history_attention"]) for e in extras], 2)}


class RecurrentDecoder(nn.Module):
    """Shared parts of the LSTM decoders: word embedding, soft attention, output layer, the
    step loop. Subclasses define the core (``_build``, ``_zero_caches``, ``_advance``).

    ``make_attention(look_back)`` makes the configured soft attention (vanilla, CACA, LightCACA)."""

    meshed = False  # reads the encoder's top level
    recurrent = True
    multi_head = False  # soft (additive, one-head) attention; AoANet's decoder attends with H heads
    look_back = False

    #: the ``model.rnn`` options this decoder reads
    rnn_options = frozenset({"word_dim", "att_hidden"})

    def __init__(self, vocab_size: int, d_model: int, word_dim: int, dropout: float,
                 make_attention: Callable[[bool], nn.Module], pad_id: int = 0, **core_options):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=pad_id)
        self.embed_dropout = nn.Dropout(dropout)
        self.attention = make_attention(self.look_back)
        self._build(d_model, word_dim, **core_options)
        self.dropout = nn.Dropout(dropout)
        self.output = Linear(d_model, vocab_size)

    def _build(self, d_model: int, word_dim: int) -> None:
        raise NotImplementedError

    def _image_vector(self, memory: Tensor, values: Tensor, memory_mask: Tensor) -> Tensor:
        """The image vector of each image (B, D): the mean of its embedded regions ``values``."""
        return masked_mean(values, memory_mask)

    def _per_image(self, mean: Tensor) -> Tensor | None:
        """Per-image gate inputs from the image vector (B, D), or None."""
        return None

    def _words(self, tokens: Tensor) -> Tensor:
        return self.embed_dropout(torch.relu(self.embed(tokens)))

    def prepare(self, memory: Tensor, memory_mask: Tensor) -> RecurrentMemory:
        """Encoder output (B, N, D) or levels (B, L, N, D) (top level read) -> per-image memory."""
        regions = self.attention.prepare(memory)
        return RecurrentMemory(regions, self._per_image(self._image_vector(memory, regions.values, memory_mask)))

    def init_state(self, memory: Tensor, memory_mask: Tensor, group: int = 1) -> DecoderState:
        """Zero LSTM states and an empty history for ``group`` hypotheses per image."""
        rows = memory.shape[0] * group
        zeros = memory.new_zeros(rows, self.d_model)
        caches = {**self._zero_caches(zeros), "history": self.attention.init_cache(rows)}
        return DecoderState(self.prepare(memory, memory_mask), memory_mask, group, 0, caches)

    def step(self, tokens: Tensor, state: DecoderState):
        """tokens (B*G,) -> logits (B*G, V), next state, extras (one layer, T = 1)."""
        out, caches, extras = self._advance(self._words(tokens), state.memory, state.memory_mask, state.caches,
                                            state.group)
        return self.output(self.dropout(out)), state.advanced(caches), [extras]

    def forward(self, tokens: Tensor, token_mask: Tensor, memory: Tensor, memory_mask: Tensor, group: int = 1):
        """Teacher forcing: tokens (R, T), R = B * group captions of memory (B, L, N, D) ->
        logits (R, T, V), extras of the one attention layer over the T steps."""
        state = self.init_state(memory, memory_mask, group)
        words, caches, outs, extras = self._words(tokens), state.caches, [], []
        for t in range(tokens.shape[1]):
            out, caches, extra = self._advance(words[:, t], state.memory, memory_mask, caches, group)
            outs.append(out)
            extras.append(extra)
        return self.output(self.dropout(torch.stack(outs, 1))), [stack_steps(extras)]

    def _zero_caches(self, zeros: Tensor) -> dict:
        raise NotImplementedError

    def _advance(self, x: Tensor, memory: RecurrentMemory, mask: Tensor, caches: dict, group: int):
        """x (R, E) the embedded previous word -> output (R, D), caches, extras."""
        raise NotImplementedError


@DECODERS.register("att2in")
class Att2inDecoder(RecurrentDecoder):
    """Att2in: one LSTM; the context of the previous hidden state's attention enters its cell
    input (through a tanh, or a two-piece max-out with ``maxout``)."""

    rnn_options = RecurrentDecoder.rnn_options | {"maxout"}

    def _build(self, d_model: int, word_dim: int, maxout: bool = False) -> None:
        self.lstm = LSTMCell(word_dim, d_model, maxout)
        self.context = Linear(d_model, (2 if maxout else 1) * d_model, bias=False)

    def _zero_caches(self, zeros: Tensor) -> dict:
        return {"h": zeros, "c": zeros}

    def _advance(self, x, memory, mask, caches, group):
        context, history, extras = self.attention(caches["h"], memory.regions, mask, caches["history"], group)
        h, c = self.lstm(x, caches["h"], caches["c"], cell_input=self.context(context))
        return h, {"h": h, "c": c, "history": history}, extras


@DECODERS.register("updown")
class UpDownDecoder(RecurrentDecoder):
    """Up-Down (BUTD): attention LSTM over [h_lang; v_bar; x], soft attention, language LSTM
    over [context; h_att]; v_bar the mean embedded region, or with ``pooled_embedding`` the
    pooled feature's own embedding (module doc)."""

    rnn_options = RecurrentDecoder.rnn_options | {"pooled_embedding"}

    def _build(self, d_model: int, word_dim: int, pooled_embedding: bool = False) -> None:
        self.pooled_embedding = pooled_embedding
        self.att_lstm = LSTMCell(d_model + word_dim, d_model)  # [h_lang_{t-1}; x_t]; v_bar per image
        self.mean_gates = Linear(d_model, 4 * d_model, bias=False)
        nn.init.uniform_(self.mean_gates.weight, -1 / math.sqrt(d_model), 1 / math.sqrt(d_model))
        self.lang_lstm = LSTMCell(2 * d_model, d_model)

    def _image_vector(self, memory: Tensor, values: Tensor, memory_mask: Tensor) -> Tensor:
        """``Dropout(ReLU(mean_i (W_f R_i + b_f)))`` from the encoder's level 0 with
        ``pooled_embedding``, else the mean embedded region."""
        if not self.pooled_embedding:
            return super()._image_vector(memory, values, memory_mask)
        if memory.dim() != 4 or memory.shape[1] != 2:
            raise ValueError(f"Up-Down with model.rnn.pooled_embedding reads the pooled embedding as level 0 of a "
                             f"(B, 2, N, D) memory (model.encoder=embed), got shape {tuple(memory.shape)}")
        return self.dropout(torch.relu(masked_mean(memory[:, 0], memory_mask)))

    def _per_image(self, mean: Tensor) -> Tensor:
        return self.mean_gates(mean)

    def _zero_caches(self, zeros: Tensor) -> dict:
        caches = {"h_att": zeros, "c_att": zeros, "h_lang": zeros, "c_lang": zeros}
        return {**caches, "context": zeros} if self.look_back else caches

    def _advance(self, x, memory, mask, caches, group):
        h_att, c_att = self.att_lstm(torch.cat([caches["h_lang"], x], 1), caches["h_att"], caches["c_att"],
                                     per_image=memory.per_image)
        context, history, extras = self.attention(h_att, memory.regions, mask, caches["history"], group,
                                                  previous=caches.get("context"))
        h_lang, c_lang = self.lang_lstm(torch.cat([context, h_att], 1), caches["h_lang"], caches["c_lang"])
        out = {"h_att": h_att, "c_att": c_att, "h_lang": h_lang, "c_lang": c_lang, "history": history}
        if self.look_back:
            out["context"] = context
        return h_lang, out, extras


@DECODERS.register("lookback")
class LookBackDecoder(UpDownDecoder):
    """Look-Back: Up-Down whose attention query carries the previous step's context c_{t-1}."""

    look_back = True
