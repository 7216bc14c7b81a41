"""AoANet: the AoA layer against its formula, the refiner (padding kept out, written out by hand),
the decoder's step against its equations, CACA's per-head history against the written-out
concatenation, and the config rules. The shared decoder contract covers AoANet with every
attention variant in test_decoder_contract.py and tests/decoding/test_beam.py."""

import math

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

from catcap.config import ConfigError
from catcap.models.builders import build_captioner
from catcap.models.config import HistoryConfig, ModelConfig, RecurrentConfig
from catcap.models.cross.aoa import AttentionOnAttention, HeadAttention
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.memory import HistoricalContextMemory
from catcap.models.encoders.aoa import AoARefiner
from catcap.models.parts import history_heads, history_layers, model_name


def test_aoa_equals_the_formula_on_a_hand_made_example():
    """f = (1, 2), Q = (3, -1); W^i = [[1, 0, 0, 1], [0, 1, 1, 0]], b^i = (0.5, -0.5),
    W^g = [[0, 0, 1, 0], [1, -1, 0, 0]], b^g = (0, 1):
    information = (1 + (-1) + 0.5, 2 + 3 - 0.5) = (0.5, 4.5); gate = sigmoid(3, 1 - 2 + 1) = sigmoid(3, 0)."""
    aoa = AttentionOnAttention(2, 2, 2)
    with torch.no_grad():
        aoa.linear.weight.copy_(torch.tensor([[1.0, 0, 0, 1], [0, 1, 1, 0], [0, 0, 1, 0], [1, -1, 0, 0]]))
        aoa.linear.bias.copy_(torch.tensor([0.5, -0.5, 0.0, 1.0]))
    out = aoa(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]]))
    expected = torch.tensor([[0.5 / (1 + math.exp(-3)), 4.5 * 0.5]])
    torch.testing.assert_close(out, expected)


def test_aoa_is_the_gated_sum_of_query_and_attended_terms():
    """sigmoid(W_q^g Q + W_v^g f + b^g) * (W_q^i Q + W_v^i f + b^i) with the weight split by input."""
    torch.manual_seed(0)
    aoa = AttentionOnAttention(5, 3, 4)
    f, q = torch.randn(6, 5), torch.randn(6, 3)
    w, b = aoa.linear.weight, aoa.linear.bias
    w_i, w_g, b_i, b_g = w[:4], w[4:], b[:4], b[4:]
    information = f @ w_i[:, :5].T + q @ w_i[:, 5:].T + b_i
    gate = torch.sigmoid(f @ w_g[:, :5].T + q @ w_g[:, 5:].T + b_g)
    torch.testing.assert_close(aoa(f, q), gate * information)


def _refine_by_hand(refiner: AoARefiner, x: torch.Tensor) -> torch.Tensor:
    """One image's real regions (N, F) through the refiner, written out with plain tensor ops."""
    a = torch.relu(x @ refiner.net[0].weight.T + refiner.net[0].bias)
    for layer in refiner.layers:
        h = torch.nn.functional.layer_norm(a, a.shape[-1:], layer.norm.weight, layer.norm.bias)
        heads = layer.attn.num_heads
        q, k, v = (p(h).view(len(h), heads, -1).transpose(0, 1) for p in (layer.attn.q_proj, layer.attn.k_proj,
                                                                          layer.attn.v_proj))
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), -1)
        attended = (weights @ v).transpose(0, 1).reshape(len(h), -1)
        w, b = layer.aoa.linear.weight, layer.aoa.linear.bias
        pre = torch.cat([attended, h], -1) @ w.T + b
        d = a.shape[-1]
        a = a + pre[:, :d] * torch.sigmoid(pre[:, d:])
    return torch.nn.functional.layer_norm(a, a.shape[-1:], refiner.norm.weight, refiner.norm.bias)


def test_refiner_keeps_padding_out_and_equals_its_equations():
    """An image refined with 2 padded regions gives exactly what it gives alone, and what the
    equations give (embedding, 2 x [LN, 2-head attention, AoA, residual], LN)."""
    torch.manual_seed(0)
    refiner = AoARefiner(F, 16, 2, 2, 1, 0.1).eval()
    features = torch.randn(2, 5, F)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    padded = features.clone()
    padded[1, 3:] = 1e3  # whatever sits in padded slots must not matter
    with torch.no_grad():
        batch = refiner(padded, mask)[:, 0]
        alone = refiner(features[1:, :3], mask[1:, :3])[0, 0]
        by_hand = _refine_by_hand(refiner, features[1, :3])
    assert batch.shape == (2, 5, 16)
    torch.testing.assert_close(batch[1, :3], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(alone, by_hand, rtol=1e-5, atol=1e-5)


def test_decoder_step_equals_its_equations():
    """h, m = LSTM([x; mean(A) + c_prev]); a = MHA(LN h, A); c = AoA(a, h); logits = W_p c + b_p."""
    model = tiny_captioner("aoa", "vanilla")
    dec = model.decoder
    features = torch.randn(2, 4, F)
    fmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        memory, mask = model.encode(features, fmask)
        state = model.init_state(memory, mask, 1)
        _, state = model.step(torch.tensor([1, 1]), state)  # step 1 gives a non-zero context
        h0, m0, c0 = state.caches["h"], state.caches["c"], state.caches["context"]
        tokens = torch.tensor([5, 7])
        logits, after = model.step(tokens, state)
        a = memory[:, 0]
        mean = torch.stack([a[0].mean(0), a[1, :2].mean(0)])
        x = torch.relu(dec.embed(tokens))
        gates = dec.lstm.input(torch.cat([x, mean + c0], 1)) + dec.lstm.hidden(h0)
        i, f, g, o = gates.chunk(4, 1)
        m = torch.sigmoid(f) * m0 + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(m)
        attn = dec.attention.attn
        q = attn.q_proj(dec.attention.norm(h)).view(2, 2, 8)  # (R, heads, d_k)
        k, v = attn.k_proj(a).view(2, 4, 2, 8), attn.v_proj(a).view(2, 4, 2, 8)
        scores = torch.einsum("rhd,rnhd->rhn", q, k) / math.sqrt(8)
        scores = scores.masked_fill(~fmask[:, None, :], float("-inf"))
        attended = torch.einsum("rhn,rnhd->rhd", scores.softmax(-1), v).reshape(2, 16)
        context = dec.aoa(attended, h)
    torch.testing.assert_close(after.caches["h"], h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(after.caches["c"], m, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(after.caches["context"], context, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, dec.output(context), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shared", [True, False])
def test_caca_final_pass_equals_the_written_out_concatenation(shared):
    """Head h's final pass is one softmax over [W_k^h A; W_k^h c_hat^h_1..t] with values
    [W_v^h A; W_v^h c_hat^h_1..t], c_hat^h_s = sum_i alpha^h_{s,i} A_i the head's first-pass
    mixture: the entries read from the region keys equal the projected mixtures."""
    torch.manual_seed(0)
    att = HeadAttention(8, 2, history=ContextAssist(shared=shared)).eval()
    a = torch.randn(1, 5, 8)
    mask = torch.ones(1, 5, dtype=torch.bool)
    prepared, cache, mixtures = att.prepare(a), HistoricalContextMemory(), []
    final_norm, final = (att.norm, att.attn) if shared else (att.final_norm, att.final_attn)
    with torch.no_grad():
        for _ in range(3):
            h = torch.randn(1, 8)
            out, cache, extras = att(h, prepared, mask, cache, 1)
            q = att.attn.q_proj(att.norm(h)).view(2, 4)
            k = att.attn.k_proj(a[0]).view(5, 2, 4)
            alpha = torch.softmax(torch.einsum("hd,nhd->hn", q, k) / 2.0, -1)  # first pass (H, N)
            mixtures.append(alpha @ a[0])  # (H, D): each head's region mixture
            q_final = final.q_proj(final_norm(h)).view(2, 4)
            heads = []
            for head in range(2):
                block = torch.cat([a[0], torch.stack([m[head] for m in mixtures])])  # (N + t, D)
                keys = final.k_proj(block).view(-1, 2, 4)[:, head]
                values = final.v_proj(block).view(-1, 2, 4)[:, head]
                weights = torch.softmax(keys @ q_final[head] / 2.0, -1)
                heads.append(weights @ values)
                torch.testing.assert_close(extras["history_weight"][0, head, 0], weights[5:].sum())
            torch.testing.assert_close(out[0], torch.cat(heads), rtol=1e-5, atol=1e-6)
    assert cache.length == 3


def _cfg(**kw):
    rnn = kw.pop("rnn", RecurrentConfig(word_dim=8))
    history = kw.pop("history", HistoryConfig())
    base = dict(encoder="aoa_refiner", decoder="aoa", cross_attention="caca", feature_dim=F, d_model=16, num_heads=2,
                encoder_layers=2, decoder_layers=1)
    return ModelConfig(**{**base, **kw}, rnn=rnn, history=history)


def test_config_builds_names_and_counts_one_layer_of_heads():
    cfg = _cfg()
    model = build_captioner(cfg, 30)
    assert type(model.encoder).__name__ == "AoARefiner" and len(model.encoder.layers) == 2
    assert type(model.decoder).__name__ == "AoADecoder"
    assert type(model.decoder.attention).__name__ == "HeadAttention" and model.decoder.attention.history == ContextAssist()
    assert history_layers(cfg) == 1 and history_heads(cfg) == 2
    assert model_name(cfg) == "AoANet + CACA"
    assert model_name(_cfg(cross_attention="vanilla")) == "AoANet"
    assert model_name(_cfg(cross_attention="light_caca")) == "AoANet + LightCACA"


def test_paper_size_parameter_count():
    """rnn 1024, word 1024, 8 heads, 6 refiner layers, F=2048, V=10,000, counted by hand."""
    cfg = ModelConfig(encoder="aoa_refiner", decoder="aoa", feature_dim=2048, d_model=1024, num_heads=8,
                      encoder_layers=6, decoder_layers=1, dropout=0.5, rnn=RecurrentConfig(word_dim=1024))
    d, v = 1024, 10_000
    embed_regions = 2048 * d + d
    refiner_layer = 2 * d + 3 * (d * d + d) + (2 * d * 2 * d + 2 * d)  # LN, W_q W_k W_v, AoA
    refiner = embed_regions + 6 * refiner_layer + 2 * d
    lstm = (2 * d) * 4 * d + 4 * d + d * 4 * d  # input [x; mean + c], bias, hidden (no bias)
    attention = 2 * d + 3 * (d * d + d)  # LN(h), W_q, W_k, W_v (no output layer)
    decoder = v * d + lstm + attention + (2 * d * 2 * d + 2 * d) + (d * v + v)
    model = build_captioner(cfg, v)
    assert sum(p.numel() for p in model.parameters()) == refiner + decoder


@pytest.mark.parametrize("kwargs, message", [
    (dict(decoder_layers=2), "one attention layer: set model.decoder_layers=1 \\(found 2\\)"),
    (dict(rnn=RecurrentConfig(word_dim=8, att_hidden=64)), "att_hidden=64 sizes additive attention"),
    (dict(history=HistoryConfig(normalize=False)), "normalize=False has no effect on cross_attention 'caca' in the recurrent decoder 'aoa'"),
    (dict(cross_attention="light_caca", history=HistoryConfig(shared=False)), "model.history.shared=False has no effect"),
    (dict(cross_attention="nope"), "unknown cross_attention 'nope'; choose one of: caca, light_caca, vanilla"),
])
def test_config_refuses_what_aoanet_would_ignore(kwargs, message):
    with pytest.raises((ConfigError, KeyError), match=message):
        _cfg(**kwargs)


def test_caca_gradients_match_finite_differences():
    """The per-head entries read from the region keys and the block-wise final pass
    differentiate correctly (float64 gradcheck, training mode without dropout)."""
    torch.manual_seed(0)
    att = HeadAttention(4, 2, dropout=0.0, history=ContextAssist()).double()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)

    def run(a, h1, h2):
        prepared = att.prepare(a)
        _, cache, _ = att(h1, prepared, mask, att.init_cache(2), 1)
        out, _, extras = att(h2, prepared, mask, cache, 1)
        return out, extras["history_weight"]

    inputs = tuple(torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in ((2, 3, 4), (2, 4), (2, 4)))
    assert torch.autograd.gradcheck(run, inputs)


def test_refiner_refuses_memory_slots():
    with pytest.raises(ValueError, match="AoARefiner encoder takes no memory slots \\(found model.memory_slots=4\\)"):
        build_captioner(_cfg(memory_slots=4), 30)
