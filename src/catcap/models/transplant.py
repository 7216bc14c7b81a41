"""Weights of the official implementations as catcap state dicts: the name mappings behind the
transplant parity tests (tests/models/test_transplant_parity.py; docs/architecture.md).

Each ``from_*`` function takes the official model's ``state_dict()`` (tensors by the official
names; nothing here reads a checkpoint file) and returns the state dict of the catcap preset
that computes the same function at the same sizes:

| official model | catcap preset | function |
|---|---|---|
| self-critical.pytorch ``TransformerModel`` | ``transformer.yaml`` | :func:`from_sc_transformer` |
| self-critical.pytorch ``AoAModel`` (refine, AoA decoder) | ``aoanet.yaml`` | :func:`from_sc_aoanet` |
| self-critical.pytorch ``UpDownModel`` | ``updown.yaml`` | :func:`from_sc_updown` |
| self-critical.pytorch ``Att2in2Model`` | ``att2in.yaml`` | :func:`from_sc_att2in2` |
| aimagelab/meshed-memory-transformer ``Transformer`` | ``m2_official.yaml`` | :func:`from_m2` |

Where the two differ on purpose the parity test switches catcap's choice off and says which
(the family docs list them). What the mappings themselves settle:

- **Token ids.** self-critical.pytorch uses index 0 as <bos>, <eos> and <pad> and words 1..V;
  catcap has <pad> 0, <bos> 1, <eos> 2, so word w becomes w + 2 (:func:`sc_vocabulary`). The
  official index 0's embedding row feeds catcap's <bos> (and <eos>), its logit is catcap's
  <eos>; catcap's <pad> and <bos> have no official logit: their output rows get weight 0 and
  bias ``NO_LOGIT`` (probability exactly 0 in fp32, the others' unchanged). M2's torchtext
  vocabulary is <unk> 0, <pad> 1, <bos> 2, <eos> 3, words 4..: a permutation of catcap's
  <pad> 0, <bos> 1, <eos> 2, <unk> 3 (:func:`m2_vocabulary`).
- **LSTM biases.** ``nn.LSTMCell`` has ``bias_ih`` and ``bias_hh``; catcap's cell has their sum.
  Gates are i, f, g, o in both; Att2in2's rows are i, f, o, g1, g2 and its a2c bias joins the
  g part of the sum.
- **Additive attention.** The official ``alpha_net`` has a bias, added to every score: softmax
  ignores it (and CACA's history weight too), so catcap's ``w`` has none.
- **Concatenated inputs.** Up-Down's attention LSTM reads [h_lang; fc; x]: catcap keeps the fc
  columns as the per-image ``mean_gates``. AoANet's ``ctx2att`` gives [values; keys] (its
  attention is called with the value half first).
- **Shapes.** M2's memory slots (1, m, H d_k) become (H, m, d_k); its three gate layers over
  [Y; C_i] become one query Linear (their Y columns and biases) and one context Linear each.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: the bias of an output row that has no official logit: exp(NO_LOGIT - max) is 0 in fp32
NO_LOGIT = -1.0e4

StateDict = dict[str, Tensor]


def sc_vocabulary(official_size: int) -> tuple[Tensor, Tensor]:
    """For self-critical.pytorch's ``vocab_size + 1`` ids: the official row feeding each catcap
    id's input embedding and its output logit (-1: none)."""
    words = torch.arange(1, official_size)
    inputs = torch.cat([torch.tensor([-1, 0, 0]), words])  # <pad>, <bos>, <eos>, words
    outputs = torch.cat([torch.tensor([-1, -1, 0]), words])
    return inputs, outputs


def m2_vocabulary(official_size: int) -> tuple[Tensor, Tensor]:
    """For M2's torchtext vocabulary: the official id of each catcap id (inputs and outputs)."""
    rows = torch.cat([torch.tensor([1, 2, 3, 0]), torch.arange(4, official_size)])
    return rows, rows


def _rows(weight: Tensor, rows: Tensor, fill: float = 0.0) -> Tensor:
    """weight[rows[c]] for every catcap id c, ``fill`` where rows[c] is -1."""
    out = weight[rows.clamp(min=0)].clone()
    out[rows < 0] = fill
    return out


def _linear(sd: StateDict, source: str, target: str, bias: bool = True) -> StateDict:
    out = {f"{target}.weight": sd[f"{source}.weight"]}
    if bias:
        out[f"{target}.bias"] = sd[f"{source}.bias"]
    return out


def _norm(sd: StateDict, source: str, target: str, annotated: bool) -> StateDict:
    """A LayerNorm: PyTorch's weight/bias, or the annotated transformer's a_2/b_2."""
    weight, bias = ("a_2", "b_2") if annotated else ("weight", "bias")
    return {f"{target}.weight": sd[f"{source}.{weight}"], f"{target}.bias": sd[f"{source}.{bias}"]}


def _embedding(sd: StateDict, source: str, target: str, rows: Tensor) -> StateDict:
    return {f"{target}.weight": _rows(sd[f"{source}.weight"], rows)}


def _output(sd: StateDict, source: str, target: str, rows: Tensor, bias: bool = True) -> StateDict:
    out = {f"{target}.weight": _rows(sd[f"{source}.weight"], rows)}
    if bias:
        out[f"{target}.bias"] = _rows(sd[f"{source}.bias"], rows, NO_LOGIT)
    return out


def _attention(sd: StateDict, projections: list[str], target: str) -> StateDict:
    """Official q, k, v (, out) Linears -> catcap's MultiHeadAttention."""
    names = ("q_proj", "k_proj", "v_proj", "out_proj")
    out: StateDict = {}
    for source, name in zip(projections, names):
        out.update(_linear(sd, source, f"{target}.{name}"))
    return out


def _lstm(sd: StateDict, source: str, target: str, order: Tensor | None = None) -> StateDict:
    """An nn.LSTMCell (or Att2in2's i2h/h2h pair, rows in ``order``) -> catcap's LSTMCell."""
    w_ih, w_hh = sd[f"{source}.weight_ih"], sd[f"{source}.weight_hh"]
    bias = sd[f"{source}.bias_ih"] + sd[f"{source}.bias_hh"]
    if order is not None:
        w_ih, w_hh, bias = w_ih[order], w_hh[order], bias[order]
    return {f"{target}.input.weight": w_ih, f"{target}.input.bias": bias, f"{target}.hidden.weight": w_hh}


def _ffn(sd: StateDict, first: str, second: str, target: str) -> StateDict:
    return {**_linear(sd, first, f"{target}.net.0"), **_linear(sd, second, f"{target}.net.2")}


def from_sc_transformer(sd: StateDict, num_layers: tuple[int, int], vocabulary: tuple[Tensor, Tensor]) -> StateDict:
    """self-critical.pytorch's TransformerModel (the annotated transformer: pre-norm sub-layers,
    its own LayerNorm) -> ``transformer.yaml``'s captioner, without the LayerNorm catcap puts
    after the feature projection (the parity test removes it)."""
    inputs, outputs = vocabulary
    out = _linear(sd, "att_embed.0", "encoder.project.net.0")
    enc, dec = "model.encoder", "model.decoder"
    for i in range(num_layers[0]):
        src, tgt = f"{enc}.layers.{i}", f"encoder.layers.{i}"
        out.update(_attention(sd, [f"{src}.self_attn.linears.{j}" for j in range(4)], f"{tgt}.attn"))
        out.update(_norm(sd, f"{src}.sublayer.0.norm", f"{tgt}.norm1", True))
        out.update(_norm(sd, f"{src}.sublayer.1.norm", f"{tgt}.norm2", True))
        out.update(_ffn(sd, f"{src}.feed_forward.w_1", f"{src}.feed_forward.w_2", f"{tgt}.ffn"))
    out.update(_norm(sd, f"{enc}.norm", "encoder.norm", True))
    for i in range(num_layers[1]):
        src, tgt = f"{dec}.layers.{i}", f"decoder.layers.{i}"
        out.update(_attention(sd, [f"{src}.self_attn.linears.{j}" for j in range(4)], f"{tgt}.self_attn"))
        out.update(_attention(sd, [f"{src}.src_attn.linears.{j}" for j in range(4)], f"{tgt}.cross.attn"))
        out.update(_norm(sd, f"{src}.sublayer.0.norm", f"{tgt}.norm1", True))
        out.update(_norm(sd, f"{src}.sublayer.1.norm", f"{tgt}.cross.norm", True))
        out.update(_norm(sd, f"{src}.sublayer.2.norm", f"{tgt}.norm3", True))
        out.update(_ffn(sd, f"{src}.feed_forward.w_1", f"{src}.feed_forward.w_2", f"{tgt}.ffn"))
    out.update(_norm(sd, f"{dec}.norm", "decoder.norm", True))
    out.update(_embedding(sd, "model.tgt_embed.0.lut", "decoder.embed", inputs))
    out.update(_output(sd, "model.generator.proj", "decoder.output", outputs))
    return out


def from_sc_aoanet(sd: StateDict, refiner_layers: int, vocabulary: tuple[Tensor, Tensor]) -> StateDict:
    """self-critical.pytorch's AoAModel (refiner with AoA, no feed-forward; AoA decoder with
    multi-head attention, context dropout, no residual) -> ``aoanet.yaml``'s captioner."""
    inputs, outputs = vocabulary
    out = _linear(sd, "att_embed.0", "encoder.net.0")
    for i in range(refiner_layers):
        src, tgt = f"refiner.layers.{i}", f"encoder.layers.{i}"
        out.update(_norm(sd, f"{src}.sublayer.0.norm", f"{tgt}.norm", True))
        out.update(_attention(sd, [f"{src}.self_attn.linears.{j}" for j in range(3)], f"{tgt}.attn"))
        out.update(_linear(sd, f"{src}.self_attn.aoa_layer.0", f"{tgt}.aoa.linear"))
    out.update(_norm(sd, "refiner.norm", "encoder.norm", True))
    out.update(_embedding(sd, "embed.0", "decoder.embed", inputs))
    out.update(_lstm(sd, "core.att_lstm", "decoder.lstm"))
    out.update(_norm(sd, "core.attention.norm", "decoder.attention.norm", True))
    out.update(_linear(sd, "core.attention.linears.0", "decoder.attention.attn.q_proj"))
    weight, bias = sd["ctx2att.weight"].chunk(2), sd["ctx2att.bias"].chunk(2)  # [values; keys]
    out.update({"decoder.attention.attn.v_proj.weight": weight[0], "decoder.attention.attn.v_proj.bias": bias[0],
                "decoder.attention.attn.k_proj.weight": weight[1], "decoder.attention.attn.k_proj.bias": bias[1]})
    out.update(_linear(sd, "core.att2ctx.0", "decoder.aoa.linear"))
    out.update(_output(sd, "logit", "decoder.output", outputs))
    return out


def _soft_attention(sd: StateDict) -> StateDict:
    """The official Attention (h2att, alpha_net) and the model's ctx2att -> catcap's AdditiveScore."""
    return {**_linear(sd, "ctx2att", "decoder.attention.score.key"),
            **_linear(sd, "core.attention.h2att", "decoder.attention.score.query"),
            "decoder.attention.score.w": sd["core.attention.alpha_net.weight"][0]}


def from_sc_updown(sd: StateDict, vocabulary: tuple[Tensor, Tensor]) -> StateDict:
    """self-critical.pytorch's UpDownModel -> ``updown.yaml``'s captioner (with the pooled
    feature's own embedding, ``model.rnn.pooled_embedding``)."""
    inputs, outputs = vocabulary
    out = {**_linear(sd, "att_embed.0", "encoder.net.0"), **_linear(sd, "fc_embed.0", "encoder.pooled")}
    out.update(_embedding(sd, "embed.0", "decoder.embed", inputs))
    out.update(_soft_attention(sd))
    att = _lstm(sd, "core.att_lstm", "decoder.att_lstm")
    w, d = att["decoder.att_lstm.input.weight"], sd["core.lang_lstm.weight_hh"].shape[1]
    att["decoder.att_lstm.input.weight"] = torch.cat([w[:, :d], w[:, 2 * d:]], 1)  # [h_lang; x]
    out.update({**att, "decoder.mean_gates.weight": w[:, d:2 * d]})  # the fc columns
    out.update(_lstm(sd, "core.lang_lstm", "decoder.lang_lstm"))
    out.update(_output(sd, "logit", "decoder.output", outputs))
    return out


def from_sc_att2in2(sd: StateDict, vocabulary: tuple[Tensor, Tensor]) -> StateDict:
    """self-critical.pytorch's Att2in2Model -> ``att2in.yaml``'s captioner (max-out cell input)."""
    inputs, outputs = vocabulary
    d = sd["core.h2h.weight"].shape[1]
    order = torch.cat([torch.arange(0, 2 * d), torch.arange(3 * d, 5 * d), torch.arange(2 * d, 3 * d)])  # i f g o
    bias = sd["core.i2h.bias"] + sd["core.h2h.bias"]
    bias[3 * d:] += sd["core.a2c.bias"]
    out = {"decoder.lstm.input.weight": sd["core.i2h.weight"][order], "decoder.lstm.input.bias": bias[order],
           "decoder.lstm.hidden.weight": sd["core.h2h.weight"][order], "decoder.context.weight": sd["core.a2c.weight"]}
    out.update(_linear(sd, "att_embed.0", "encoder.net.0"))
    out.update(_embedding(sd, "embed.0", "decoder.embed", inputs))
    out.update(_soft_attention(sd))
    out.update(_output(sd, "logit", "decoder.output", outputs))
    return out


def from_m2(sd: StateDict, num_layers: tuple[int, int], heads: int, vocabulary: tuple[Tensor, Tensor]) -> StateDict:
    """aimagelab/meshed-memory-transformer's Transformer (MemoryAugmentedEncoder with
    ScaledDotProductAttentionMemory, MeshedDecoder) -> ``m2_official.yaml``'s captioner."""
    inputs, outputs = vocabulary
    out = {**_linear(sd, "encoder.fc", "encoder.project.net.0"), **_norm(sd, "encoder.layer_norm", "encoder.project.net.3", False)}
    for i in range(num_layers[0]):
        src, tgt = f"encoder.layers.{i}", f"encoder.layers.{i}"
        att = f"{src}.mhatt.attention"
        out.update(_attention(sd, [f"{att}.fc_{p}" for p in "qkvo"], f"{tgt}.attn"))
        for name, slots in (("keys", "m_k"), ("values", "m_v")):
            m = sd[f"{att}.{slots}"][0]  # (m, H * d_k)
            out[f"{tgt}.slots.{name}"] = m.view(m.shape[0], heads, -1).transpose(0, 1).contiguous()
        out.update(_norm(sd, f"{src}.mhatt.layer_norm", f"{tgt}.norm1", False))
        out.update(_ffn(sd, f"{src}.pwff.fc1", f"{src}.pwff.fc2", f"{tgt}.ffn"))
        out.update(_norm(sd, f"{src}.pwff.layer_norm", f"{tgt}.norm2", False))
    out.update(_embedding(sd, "decoder.word_emb", "decoder.embed", inputs))
    out["decoder.positions.table"] = sd["decoder.pos_emb.weight"]
    for i in range(num_layers[1]):
        src, tgt = f"decoder.layers.{i}", f"decoder.layers.{i}"
        out.update(_attention(sd, [f"{src}.self_att.attention.fc_{p}" for p in "qkvo"], f"{tgt}.self_attn"))
        out.update(_norm(sd, f"{src}.self_att.layer_norm", f"{tgt}.norm1", False))
        out.update(_attention(sd, [f"{src}.enc_att.attention.fc_{p}" for p in "qkvo"], f"{tgt}.cross.attn"))
        out.update(_norm(sd, f"{src}.enc_att.layer_norm", f"{tgt}.cross.norm", False))
        gates = [sd[f"{src}.fc_alpha{level}.weight"] for level in (1, 2, 3)]
        d = gates[0].shape[0]
        out[f"{tgt}.cross.mix.query.weight"] = torch.cat([g[:, :d] for g in gates])
        out[f"{tgt}.cross.mix.query.bias"] = torch.cat([sd[f"{src}.fc_alpha{level}.bias"] for level in (1, 2, 3)])
        out.update({f"{tgt}.cross.mix.context.{level}.weight": g[:, d:] for level, g in enumerate(gates)})
        out.update(_ffn(sd, f"{src}.pwff.fc1", f"{src}.pwff.fc2", f"{tgt}.ffn"))
        out.update(_norm(sd, f"{src}.pwff.layer_norm", f"{tgt}.norm3", False))
    out.update(_output(sd, "decoder.fc", "decoder.output", outputs, bias=False))
    return out
