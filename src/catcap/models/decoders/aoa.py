"""AoANet's decoder (Huang et al. 2019; SPEC.md §5) on the recurrent decoder contract
(:class:`~catcap.models.decoders.lstm.RecurrentDecoder`).

    x_t      = Dropout(ReLU(W_e w_t))
    h_t, m_t = LSTM([x_t; mean(A) + Dropout(c_{t-1})], h_{t-1}, m_{t-1})
    a_t      = MHA(LN(h_t), A, A)              heads concatenated, no output layer
    c_t      = AoA(a_t, h_t)                   the context, fed back at step t + 1
    p_t      = softmax(W_p Dropout(c_t))

A is the refiner's output (:mod:`catcap.models.encoders.aoa`), mean(A) its mean over the
real regions. The attention is :class:`~catcap.models.cross.aoa.HeadAttention` running the
``model.cross_attention`` variant (vanilla, CACA, LightCACA), so AoANet + CACA keeps per-head
histories of attended contexts and AWC has one layer of H heads. The LSTM's input weight on
``mean(A) + c_{t-1}`` is applied to mean(A) once per image (the per-image gate input) and to
c_{t-1} per row, which is the same sum. h, m, c_{t-1} and the history are the decoder state's
caches (reordered by beam search). Dropouts: ``model.dropout`` on the words, the fed-back
context (the reference's ``ctx_drop``) and the output; 0.1 on the attention weights.
Legend: R rows (B images x G hypotheses), D the rnn size, E word embedding width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from catcap.models.cross.aoa import AttentionOnAttention
from catcap.models.decoders.lstm import LSTMCell, RecurrentDecoder
from catcap.registry import DECODERS


@DECODERS.register("aoa")
class AoADecoder(RecurrentDecoder):
    """AoANet's LSTM decoder with multi-head attention and attention on attention."""

    multi_head = True  # its attention is multi-head (HeadAttention), H history weights per step
    rnn_options = frozenset({"word_dim"})  # no additive attention: no att_hidden

    def _build(self, d_model: int, word_dim: int) -> None:
        self.word_dim = word_dim
        self.lstm = LSTMCell(word_dim + d_model, d_model)  # [x_t; mean(A) + c_{t-1}]
        self.context_dropout = nn.Dropout(self.embed_dropout.p)
        self.aoa = AttentionOnAttention(d_model, d_model, d_model)

    def _per_image(self, mean: Tensor) -> Tensor:
        """W_c mean(A) (B, 4D): the LSTM input weight's context columns on the mean region."""
        return F.linear(mean, self.lstm.input.weight[:, self.word_dim:])

    def _zero_caches(self, zeros: Tensor) -> dict:
        return {"h": zeros, "c": zeros, "context": zeros}

    def _advance(self, x, memory, mask, caches, group):
        h, c = self.lstm(torch.cat([x, self.context_dropout(caches["context"])], 1), caches["h"], caches["c"],
                         per_image=memory.per_image)
        attended, history, extras = self.attention(h, memory.regions, mask, caches["history"], group)
        context = self.aoa(attended, h)
        return context, {"h": h, "c": c, "context": context, "history": history}, extras
