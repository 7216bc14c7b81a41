"""The recurrent captioners (Att2in, Up-Down, Look-Back) and their soft (Light)CACA: the history
memory step by step, the final pass against its written-out formula, what each decoder's
LSTM reads, and the config rules. The shared decoder contract covers them in
test_decoder_contract.py and tests/decoding/test_beam.py."""

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

from catcap.config import ConfigError
from catcap.models.builders import build_captioner
from catcap.models.config import HistoryConfig, ModelConfig, RecurrentConfig
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.soft import SoftAttention, SoftHistory
from catcap.models.parts import history_heads, history_layers, model_name


def batch():
    g = torch.Generator().manual_seed(1)
    features = torch.randn(2, 4, F, generator=g)
    feature_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    captions = torch.tensor([[1, 5, 6, 7, 8, 2], [1, 9, 10, 2, 0, 0]])
    return features, feature_mask, captions


@pytest.mark.parametrize("cross, entries_of", [("caca", "contexts"), ("light_caca", "queries")])
def test_history_grows_by_one_entry_per_step(cross, entries_of):
    """Each step appends exactly one vector per hypothesis: the first-pass context (CACA) or
    the attention query h_att (LightCACA) of that step; earlier entries never change."""
    model = tiny_captioner("updown", cross)
    features, fmask, captions = batch()
    with torch.no_grad():
        memory, mask = model.encode(features, fmask)
        state = model.init_state(memory, mask, 1)
        assert state.caches["history"].length == 0
        previous = None
        for t in range(4):
            h_before = state.caches["h_lang"]
            _, state = model.step(captions[:, t], state)
            history = state.caches["history"]
            assert history.values.shape == (2, t + 1, 16) and history.keys.shape == (2, t + 1, 8)
            if previous is not None:
                assert torch.equal(history.values[:, :t], previous)
            previous = history.values.clone()
            if entries_of == "queries":  # the entry is h_att of this step
                assert torch.equal(history.values[:, t], state.caches["h_att"])
            else:  # the entry is a convex combination of the image's real regions
                assert not torch.equal(history.values[:, t], h_before)
                regions = model.decoder.attention.prepare(memory).values  # (B, N, D)
                alpha = torch.linalg.lstsq(regions[1, :2].T, history.values[1, t][:, None]).solution
                assert float(alpha.sum()) == pytest.approx(1.0, abs=1e-4) and bool((alpha > -1e-5).all())


@pytest.mark.parametrize("strategy, expected", [
    ("chc", [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
    ("ihc", [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]]),
    ("ohc", [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
])
def test_history_attention_mask_on_a_hand_written_example(strategy, expected):
    """Step t (rows) may attend entries s (columns) with s <= t (ihc: s < t), written out."""
    model = tiny_captioner("lookback", "caca", {"strategy": strategy})
    features, fmask, captions = batch()
    with torch.no_grad():
        _, (extras,) = model(features, fmask, captions[:, :5], captions[:, :5] != 0)
    seen = (extras["history_attention"][0, 0] > 0).int().tolist()
    assert seen == expected
    regions = extras["region_attention"]
    if strategy == "ohc":
        assert regions is None and torch.allclose(extras["history_weight"], torch.ones(2, 1, 4))
    else:
        assert bool((regions[1, 0, :, 2:] == 0).all()), "padded regions get no weight"
        total = regions.sum(-1) + extras["history_attention"].sum(-1)
        torch.testing.assert_close(total, torch.ones_like(total))
        torch.testing.assert_close(extras["history_attention"].sum(-1), extras["history_weight"])


def _concatenated_softmax(score, h, values, history, mask):
    """The final pass written out: one softmax over [regions; entries] scored by ``score``."""
    q = score.project_query(h)
    s_x = torch.tanh(score.key(values) + q[:, None]) @ score.w  # (B, N)
    s_x = s_x.masked_fill(~mask, float("-inf"))
    s_h = torch.tanh(score.key(history) + q[:, None]) @ score.w  # (B, M)
    alpha = torch.cat([s_x, s_h], 1).softmax(-1)
    return (alpha[:, :, None] * torch.cat([values, history], 1)).sum(1), alpha[:, values.shape[1]:].sum(1)


def test_caca_final_pass_equals_one_softmax_over_regions_and_history():
    """CACA's final context (computed from the first pass's scores, a = sigmoid(lse_H - lse_X))
    equals attending with one softmax to [regions; c_hat_1..t], and the history weight is the
    softmax mass on the entries."""
    torch.manual_seed(0)
    attention = SoftAttention(6, 5, history=ContextAssist()).eval()
    plain = SoftAttention(6, 5).eval()  # the same weights without a history: the first pass alone
    plain.load_state_dict(attention.state_dict())
    values, h = torch.randn(2, 4, 6), torch.randn(2, 6)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    earlier = torch.randn(2, 2, 6)
    cache = SoftHistory(earlier, attention.score.key(earlier))
    prepared = attention.prepare(values)
    with torch.no_grad():
        c, after, extras = attention(h, prepared, mask, cache, 1)
        c_hat, _, _ = plain(h, prepared, mask, None, 1)
        expected, weight = _concatenated_softmax(attention.score, h, values, after.values, mask)
    torch.testing.assert_close(after.values[:, 2], c_hat)
    torch.testing.assert_close(after.keys[:, 2], attention.score.key(c_hat))  # read from the region keys
    torch.testing.assert_close(c, expected)
    torch.testing.assert_close(extras["history_weight"][:, 0, 0], weight)


def test_light_caca_entries_are_the_queries():
    torch.manual_seed(0)
    attention = SoftAttention(6, 5, history=ContextAssist(light=True)).eval()
    values, h = torch.randn(2, 4, 6), torch.randn(2, 6)
    mask = torch.ones(2, 4, dtype=torch.bool)
    with torch.no_grad():
        c, after, _ = attention(h, attention.prepare(values), mask, SoftHistory(), 1)
        expected, _ = _concatenated_softmax(attention.score, h, values, h[:, None], mask)
    torch.testing.assert_close(after.values[:, 0], h)
    torch.testing.assert_close(c, expected)


def test_each_decoder_reads_what_its_paper_says():
    """Att2in's query is the previous hidden state (so its first attention reads h = 0 and the
    first step's output does not depend on it through the query); Up-Down's attention LSTM
    reads the mean region; Look-Back's query reads the previous context."""
    features, fmask, captions = batch()
    for arch in ("att2in", "updown", "lookback"):
        model = tiny_captioner(arch, "vanilla")
        with torch.no_grad():
            memory, mask = model.encode(features, fmask)
            state = model.init_state(memory, mask, 1)
            assert set(state.caches) == {"att2in": {"h", "c", "history"},
                                         "updown": {"h_att", "c_att", "h_lang", "c_lang", "history"},
                                         "lookback": {"h_att", "c_att", "h_lang", "c_lang", "context", "history"}}[arch]
            _, state = model.step(captions[:, 0], state)
            if arch == "lookback":  # the context of step 1 is kept for step 2's query
                assert state.caches["context"].abs().sum() > 0
    updown = tiny_captioner("updown", "vanilla")
    with torch.no_grad():  # the per-image mean region enters the attention LSTM's gates
        prepared = updown.decoder.prepare(*updown.encode(features, fmask))
        regions = prepared.regions.values
        mean = torch.stack([regions[0].mean(0), regions[1, :2].mean(0)])
        torch.testing.assert_close(prepared.per_image, updown.decoder.mean_gates(mean))


def _cfg(**kw):
    rnn = kw.pop("rnn", RecurrentConfig(word_dim=8, att_hidden=8))
    history = kw.pop("history", HistoryConfig())
    base = dict(encoder="embed", decoder="updown", cross_attention="caca", feature_dim=F, d_model=16, num_heads=1,
                decoder_layers=1)
    return ModelConfig(**{**base, **kw}, rnn=rnn, history=history)


def test_config_builds_names_and_counts_one_history_layer_and_head():
    cfg = _cfg()
    model = build_captioner(cfg, 30)
    assert type(model.decoder).__name__ == "UpDownDecoder"
    assert type(model.decoder.attention).__name__ == "SoftAttention" and model.decoder.attention.history == ContextAssist()
    assert history_layers(cfg) == 1 and history_heads(cfg) == 1
    assert model_name(cfg) == "Up-Down + CACA" and model_name(_cfg(decoder="att2in", cross_attention="vanilla")) == "Att2in"
    assert model_name(_cfg(decoder="lookback", cross_attention="light_caca")) == "Look-Back + LightCACA"
    transformer = ModelConfig(feature_dim=F, d_model=16, num_heads=2)
    assert history_layers(transformer) == 3 and history_heads(transformer) == 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(decoder_layers=3), "one attention layer: set model.decoder_layers=1 \\(found 3\\)"),
    (dict(history=HistoryConfig(normalize=False)), "model.history.normalize=False has no effect on cross_attention 'caca' in the recurrent decoder 'updown'"),
    (dict(history=HistoryConfig(placement="gated")), "placement='gated' has no effect"),
    (dict(cross_attention="light_caca", history=HistoryConfig(shared=False)), "model.history.shared=False has no effect"),
    (dict(decoder="transformer", decoder_layers=2, num_heads=2), "model.rnn .* has no effect on decoder 'transformer'"),
    (dict(cross_attention="nope"), "unknown cross_attention 'nope'; choose one of: caca, light_caca, vanilla"),
    (dict(rnn=RecurrentConfig(8, 8, maxout=True)), "model.rnn.maxout=True makes Att2in's cell input a max-out .*; "
                                                   "decoder 'updown' does not read it"),
    (dict(decoder="att2in", rnn=RecurrentConfig(8, 8, pooled_embedding=True)), "model.rnn.pooled_embedding=True gives "
                                                                               ".* decoder 'att2in' does not read it"),
    (dict(encoder="transformer", rnn=RecurrentConfig(8, 8, pooled_embedding=True)), "pooled_embedding needs the region "
                                                                                    "embedding .*: set model.encoder=embed"),
])
def test_config_refuses_what_a_recurrent_decoder_would_ignore(kwargs, message):
    with pytest.raises((ConfigError, KeyError), match=message):
        _cfg(**kwargs)


def test_embed_encoder_refuses_memory_slots():
    with pytest.raises(ValueError, match="RegionEmbedding encoder takes no memory slots \\(found model.memory_slots=4\\)"):
        build_captioner(_cfg(memory_slots=4), 30)


def test_soft_caca_gradients_match_finite_differences():
    """The in-place tanh and the block-wise final pass differentiate correctly (float64 gradcheck)."""
    torch.manual_seed(0)
    attention = SoftAttention(4, 3, history=ContextAssist()).double()
    values = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    earlier = torch.randn(2, 2, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)

    def run(values, h):
        cache = SoftHistory(earlier, attention.score.key(earlier))
        c, _, extras = attention(h, attention.prepare(values), mask, cache, 1)
        return c, extras["history_weight"]

    assert torch.autograd.gradcheck(run, (values, h))


def test_the_official_forms_by_hand():
    """Att2in's max-out cell: c = sigmoid(f) c + sigmoid(i) max(g_1, g_2) with the context added to
    both pieces; Up-Down's pooled-feature embedding: the attention LSTM's per-image input reads
    ReLU(W_f mean(R) + b_f) of the raw region features (the official functions themselves are
    checked against the official code in test_transplant_parity.py)."""
    torch.manual_seed(0)
    features, fmask, _ = batch()
    att2in = build_captioner(_cfg(decoder="att2in", cross_attention="vanilla", rnn=RecurrentConfig(8, 8, maxout=True)), 30)
    cell, d = att2in.decoder.lstm, 16
    x, h, c, extra = torch.randn(2, 8), torch.randn(2, d), torch.randn(2, d), torch.randn(2, 2 * d)
    gates = cell.input(x) + cell.hidden(h)
    i, f, g, o = gates[:, :d], gates[:, d:2 * d], gates[:, 2 * d:4 * d] + extra, gates[:, 4 * d:]
    want_c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.maximum(g[:, :d], g[:, d:])
    got_h, got_c = cell(x, h, c, cell_input=extra)
    torch.testing.assert_close(got_c, want_c)
    torch.testing.assert_close(got_h, torch.sigmoid(o) * torch.tanh(want_c))
    updown = build_captioner(_cfg(cross_attention="vanilla", rnn=RecurrentConfig(8, 8, pooled_embedding=True)), 30).eval()
    with torch.no_grad():
        prepared = updown.decoder.prepare(*updown.encode(features, fmask))
        mean = torch.stack([features[0].mean(0), features[1, :2].mean(0)])
        pooled = torch.relu(updown.encoder.pooled(mean))
        torch.testing.assert_close(prepared.per_image, updown.decoder.mean_gates(pooled), rtol=1e-5, atol=1e-6)
