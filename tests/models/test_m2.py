"""M2 (meshed-memory Transformer) and M2 + (Light)CACA against SPEC.md §5 / §3 written out by
hand: memory slots, encoder levels, gates, the meshed cross attention with the history per level
or after the gates, parameter counts, AWC shapes and config checks."""

import math
from pathlib import Path

import pytest
import torch

from catcap.config import ConfigError, load_config
from catcap.models.attention import KeyValue
from catcap.models.builders import build_captioner
from catcap.models.config import HistoryConfig, ModelConfig
from catcap.models.cross.mix import MeshedGates, top_levels
from catcap.models.cross.transformer import TransformerCrossAttention
from catcap.models.encoders.transformer import MemoryAugmentedEncoder, MemorySlots, TransformerEncoder
from catcap.models.parts import history_heads, model_name
from catcap.registry import CROSS_ATTENTION
from catcap.training.awc import make_awc
from catcap.training.experiment import ExperimentConfig

D, H, N, T, L = 8, 2, 3, 4, 3
CONFIGS = Path(__file__).parents[2] / "configs" / "models"


def mha(attn, query, keys, values=None):
    """MHA of SPEC.md §2 by hand with the module's weights: query (T, D), keys (M, D)."""
    values = keys if values is None else values
    q, k, v = attn.q_proj(query), attn.k_proj(keys), attn.v_proj(values)
    d_k, heads, weights = D // H, [], []
    for h in range(H):
        part = slice(h * d_k, (h + 1) * d_k)
        w = (q[:, part] @ k[:, part].T / math.sqrt(d_k)).softmax(-1)
        heads.append(w @ v[:, part])
        weights.append(w)
    return attn.out_proj(torch.cat(heads, -1)), torch.stack(weights)


def gate_by_hand(mix, q_ln, attended, i):
    """alpha_i = sigmoid(W_i [q_ln; A_i] + b_i) with W_i = [W_i^q, W_i^c] assembled from the module."""
    w = torch.cat([mix.query.weight[i * D:(i + 1) * D], mix.context[i].weight], dim=1)  # (D, 2D)
    return torch.sigmoid(torch.cat([q_ln, attended], -1) @ w.T + mix.query.bias[i * D:(i + 1) * D])


def meshed_by_hand(mix, q, q_ln, parts):
    """c = q + sum_i alpha_i * A_i / sqrt(L)."""
    return q + sum(gate_by_hand(mix, q_ln, a, i) * a for i, a in enumerate(parts)) / math.sqrt(len(parts))


def randomise_norms(module):
    with torch.no_grad():
        for norm in [m for m in module.modules() if isinstance(m, torch.nn.LayerNorm)]:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)


# -- gates ----------------------------------------------------------------------------------------

def test_gates_on_a_hand_made_example():
    """Two levels, D = 2: zero weights and chosen biases give alpha = sigmoid(b) exactly."""
    mix = MeshedGates(2, 2)
    with torch.no_grad():
        mix.query.weight.zero_()
        for c in mix.context:
            c.weight.zero_()
        mix.query.bias.copy_(torch.tensor([math.log(3), 0.0, -math.log(3), 0.0]))  # b_1, b_2
    q_ln = torch.zeros(1, 1, 2)
    attended = torch.tensor([[[[2.0, 4.0]], [[4.0, 8.0]]]])  # (R=1, L=2, T=1, D=2)
    alpha = mix.gates(q_ln, attended)
    torch.testing.assert_close(alpha[0, :, 0], torch.tensor([[0.75, 0.5], [0.25, 0.5]]))
    torch.testing.assert_close(mix(q_ln, attended)[0, 0], torch.tensor([0.75 * 2 + 0.25 * 4, 0.5 * 4 + 0.5 * 8]) / math.sqrt(2))
    # the context's part: W_2^c = I makes alpha_2 = sigmoid(A_2 - ln 3)
    with torch.no_grad():
        mix.context[1].weight.copy_(torch.eye(2))
    torch.testing.assert_close(mix.gates(q_ln, attended)[0, 1, 0], torch.sigmoid(torch.tensor([4.0, 8.0]) - torch.tensor([math.log(3), 0.0])))


def test_gates_stay_in_the_open_unit_interval_and_match_the_formula():
    torch.manual_seed(0)
    mix = MeshedGates(D, L)
    q_ln, attended = torch.randn(5, T, D), torch.randn(5, L, T, D) * 3
    alpha = mix.gates(q_ln, attended)
    assert alpha.shape == (5, L, T, D) and bool(((alpha > 0) & (alpha < 1)).all())
    for i in range(L):
        torch.testing.assert_close(alpha[:, i], gate_by_hand(mix, q_ln, attended[:, i], i))
    out = mix(q_ln, attended)
    assert out.shape == (5, T, D)
    torch.testing.assert_close(out, (alpha * attended).sum(1) / math.sqrt(L))


def test_gate_init_is_m2s_xavier_uniform_with_zero_bias():
    torch.manual_seed(0)
    mix = MeshedGates(64, 3)
    bound = math.sqrt(6 / (3 * 64))  # fan_in 2D, fan_out D of each (D, 2D) gate matrix
    for w in [mix.query.weight.detach()] + [c.weight.detach() for c in mix.context]:
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.9 * bound
    assert bool((mix.query.bias == 0).all())


# -- encoder: memory slots and levels --------------------------------------------------------------

def test_memory_augmented_attention_by_hand():
    """One head: keys [W_k X; sqrt(d_k) M_k], values [W_v X; sqrt(m) M_v], padded regions out."""
    torch.manual_seed(0)
    enc = MemoryAugmentedEncoder(D, D, 1, 1, 16, 0.0, memory_slots=5).eval()
    layer = enc.layers[0]
    x, mask = torch.randn(1, N, D), torch.tensor([[True, True, False]])
    h = layer.norm1(x)[0]
    keys = torch.cat([layer.attn.k_proj(h[:2]), layer.slots.keys[0] * math.sqrt(D)])
    values = torch.cat([layer.attn.v_proj(h[:2]), layer.slots.values[0] * math.sqrt(5)])
    w = (layer.attn.q_proj(h) @ keys.T / math.sqrt(D)).softmax(-1)
    want = x[0] + layer.attn.out_proj(w @ values)
    want = want + layer.ffn(layer.norm2(want))
    with torch.no_grad():
        got = layer(x, mask)[0]
    torch.testing.assert_close(got[:2], want[:2], rtol=1e-5, atol=1e-6)


def test_slot_init_follows_the_official_code():
    torch.manual_seed(0)
    slots = MemorySlots(num_slots=400, num_heads=8, d_k=64)
    assert slots.keys.shape == slots.values.shape == (8, 400, 64)
    assert abs(float(slots.keys.detach().std()) - 1 / 64) < 0.02 / 64
    assert abs(float(slots.values.detach().std()) - 1 / 400) < 0.02 / 400


def test_memory_slots_change_the_output_and_get_gradients():
    torch.manual_seed(0)
    enc = MemoryAugmentedEncoder(12, D, H, 2, 16, 0.0, memory_slots=4)
    x, mask = torch.randn(2, 5, 12), torch.ones(2, 5, dtype=torch.bool)
    out = enc(x, mask)
    out.square().sum().backward()
    for layer in enc.layers:
        assert float(layer.slots.keys.grad.abs().sum()) > 0 and float(layer.slots.values.grad.abs().sum()) > 0
    with torch.no_grad():
        enc.layers[0].slots.values.mul_(5.0)
        assert not torch.allclose(enc(x, mask), out)


def test_slots_are_appended_once_without_a_copy_per_query():
    slots = MemorySlots(3, H, D // H)
    kv = KeyValue(torch.randn(2, H, 5, D // H), torch.randn(2, H, 5, D // H))
    extended, mask = slots.extend(kv, torch.tensor([[[True] * 5], [[True, True, False, False, False]]]))
    assert extended.k.shape == (2, H, 8, D // H)
    assert mask.tolist() == [[[True] * 8], [[True, True, False, False, False, True, True, True]]]
    torch.testing.assert_close(extended.v[1, :, 5:], slots.values.detach() * math.sqrt(3))


def test_every_encoder_level_is_kept_and_the_top_one_is_the_transformer_encoders_output():
    torch.manual_seed(0)
    m2 = MemoryAugmentedEncoder(12, D, H, L, 16, 0.0, memory_slots=4).eval()
    randomise_norms(m2)
    plain = TransformerEncoder(12, D, H, L, 16, 0.0, memory_slots=4).eval()
    missing = plain.load_state_dict(m2.state_dict(), strict=False)
    assert missing.unexpected_keys == [f"level_norms.{i}.{p}" for i in range(L - 1) for p in ("weight", "bias")]
    x, mask = torch.randn(2, 5, 12), torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.no_grad():
        levels, top = m2(x, mask), plain(x, mask)
        assert levels.shape == (2, L, 5, D) and top.shape == (2, 1, 5, D)
        torch.testing.assert_close(levels[:, -1], top[:, 0])
        stream = m2.project(x)  # level i = LayerNorm_i(residual stream after layer i)
        for i, layer in enumerate(m2.layers):
            stream = layer(stream, mask)
            norm = m2.level_norms[i] if i < L - 1 else m2.norm
            torch.testing.assert_close(levels[:, i], norm(stream))


def test_top_levels_takes_the_top_levels_and_explains_a_shortfall():
    memory = torch.randn(2, 3, 5, D)
    assert torch.equal(top_levels(memory, 2), memory[:, 1:])
    assert top_levels(memory[:, 0], 1).shape == (2, 1, 5, D)
    with pytest.raises(ValueError, match=r"reads 3 encoder level\(s\), but the memory has shape \(2, 1, 5, 8\)"):
        top_levels(memory[:, :1], 3)


# -- the meshed cross attention, by hand --------------------------------------------------------------

def make_meshed(variant, **options):
    torch.manual_seed(1)
    history = CROSS_ATTENTION.get(variant)(**options)
    module = TransformerCrossAttention(D, H, 0.0, mix=MeshedGates(D, L), history=history).eval()
    randomise_norms(module)
    return module


def test_meshed_vanilla_cross_attention_is_m2s_formula():
    module = make_meshed("vanilla")
    q, levels = torch.randn(2, T, D), torch.randn(2, L, N, D)
    with torch.no_grad():
        c, _ = module(q, module.prepare(levels), torch.ones(2, N, dtype=torch.bool))
        for b in range(2):
            q_ln = module.norm(q[b])
            parts = [mha(module.attn, q_ln, levels[b, i])[0] for i in range(L)]
            torch.testing.assert_close(c[b], meshed_by_hand(module.mix, q[b], q_ln, parts), rtol=1e-5, atol=1e-6)


def spec_meshed_caca(module, q, levels, placement, light=False):
    """Step by step for one caption: q (T, D), levels (L, N, D) -> c (T, D), a (L*H, T).
    per_level: every level i is a CACA over X_i with its own memory of LN(q + MHA(q_ln, X_i));
    gated: one memory of LN(q + Mix(q_ln, [MHA(q_ln, X_i)]_i)); light: one memory of LN(q)."""
    memories = [[] for _ in range(L)] if placement == "per_level" and not light else [[]]
    outputs, weights = [], []
    for t in range(q.shape[0]):
        q_t = q[t:t + 1]
        q_ln = module.norm(q_t)
        first = [mha(module.attn, q_ln, levels[i])[0] for i in range(L)]
        if light:
            memories[0].append(q_ln)
        elif placement == "gated":
            memories[0].append(module.norm(meshed_by_hand(module.mix, q_t, q_ln, first)))
        else:
            for i in range(L):
                memories[i].append(module.norm(q_t + first[i]))
        finals, a = [], []
        for i in range(L):
            memory = torch.cat(memories[i if len(memories) == L else 0])
            out, w = mha(module.attn, q_ln, torch.cat([levels[i], memory]))
            finals.append(out)
            a.append(w[:, 0, N:].sum(-1))  # (H,)
        outputs.append(meshed_by_hand(module.mix, q_t, q_ln, finals))
        weights.append(torch.cat(a))  # level-heads: level i's head h at i * H + h
    return torch.cat(outputs), torch.stack(weights, 1)


def parallel_and_steps_equal(module, spec):
    """The meshed cross attention over all positions and step by step (two captions, one padded)
    gives ``spec(q, levels)`` -> (c (t, D), a (L*H, t)) of each caption; -> the last step's cache."""
    q, levels = torch.randn(2, T, D), torch.randn(2, L, N, D)
    memory_mask, query_mask = torch.ones(2, N, dtype=torch.bool), torch.tensor([[True] * T, [True, True, True, False]])
    with torch.no_grad():
        prepared = module.prepare(levels)
        c, extras = module(q, prepared, memory_mask, query_mask)
        cache, steps = module.init_cache(2), []
        for t in range(T):
            out, cache, _ = module.step(q[:, t:t + 1], prepared, memory_mask, cache, 1)
            steps.append(out)
        for b in range(2):
            t = int(query_mask[b].sum())
            want_c, want_a = spec(q[b, :t], levels[b])
            torch.testing.assert_close(c[b, :t], want_c, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(torch.cat(steps, 1)[b, :t], want_c, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(extras["history_weight"][b, :, :t], want_a, rtol=1e-5, atol=1e-6)
    return cache


@pytest.mark.parametrize("variant, placement", [("caca", "per_level"), ("caca", "gated"), ("light_caca", None)])
def test_meshed_caca_equals_the_specification_in_parallel_and_step_by_step(variant, placement):
    light = placement is None
    module = make_meshed(variant, **({} if light else {"placement": placement}))
    cache = parallel_and_steps_equal(module, lambda q, levels: spec_meshed_caca(module, q, levels, placement, light))
    per_level_memory = placement == "per_level"
    assert cache.keys.k.shape == (2, (L if per_level_memory else 1) * H, T, D // H)


def test_dropout_path_equals_the_blockwise_path_for_shared_histories(monkeypatch):
    """The concatenated softmax (used with attention dropout) and the block-wise eval path agree
    when one history is read by every level (gated CACA, LightCACA)."""
    for variant, options in [("caca", {"placement": "gated"}), ("light_caca", {})]:
        module = make_meshed(variant, **options)
        q, levels = torch.randn(2, T, D), torch.randn(2, L, N, D)
        mask = torch.tensor([[True] * N, [True, False, False]])
        with torch.no_grad():
            fast, fx = module(q, module.prepare(levels), mask)
            monkeypatch.setattr(type(module), "attention_dropout", property(lambda self: 1e-12))  # the dropout path
            slow, sx = module(q, module.prepare(levels), mask)
            monkeypatch.undo()
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(fx["history_weight"], sx["history_weight"], rtol=1e-5, atol=1e-6)


# -- models built from configs: parameters, AWC, config checks ---------------------------------------

def count(model):
    return sum(p.numel() for p in model.parameters())


def test_parameter_counts_m2_vs_transformer_and_shared_caca_adds_nothing():
    d, heads, enc, dec, slots = 32, 4, 3, 2, 6
    base = dict(d_model=d, num_heads=heads, d_ff=64, feature_dim=16, encoder_layers=enc, decoder_layers=dec)
    transformer = count(build_captioner(ModelConfig(**base), 50))
    m2_cfg = dict(base, encoder="memory_augmented", decoder="meshed", memory_slots=slots)
    m2 = count(build_captioner(ModelConfig(**m2_cfg), 50))
    slots_params = enc * 2 * slots * d  # M_k, M_v: m slots x D per layer
    level_norms = (enc - 1) * 2 * d
    gates = dec * enc * (2 * d * d + d)  # per decoder layer and level: W_i (D x 2D) and b_i
    assert m2 == transformer + slots_params + level_norms + gates
    for cross in ("caca", "light_caca"):
        assert count(build_captioner(ModelConfig(**m2_cfg, cross_attention=cross), 50)) == m2
    gated = ModelConfig(**m2_cfg, cross_attention="caca", history=HistoryConfig(placement="gated"))
    assert count(build_captioner(gated, 50)) == m2
    not_shared = ModelConfig(**m2_cfg, cross_attention="caca", history=HistoryConfig(shared=False))
    assert count(build_captioner(not_shared, 50)) == m2 + dec * (2 * d + 4 * (d * d + d))


def test_paper_size_presets():
    m2 = load_config(ExperimentConfig, CONFIGS / "m2.yaml").model
    assert (m2.encoder, m2.decoder, m2.cross_attention, m2.memory_slots, m2.d_model, m2.num_heads) == \
        ("memory_augmented", "meshed", "vanilla", 40, 512, 8)
    model = build_captioner(m2, 10000)
    assert model.encoder.layers[0].slots.keys.shape == (8, 40, 64)
    assert all(layer.cross.mix.levels == 3 for layer in model.decoder.layers)
    for name, cross in [("m2_caca", "caca"), ("m2_light_caca", "light_caca")]:
        cfg = load_config(ExperimentConfig, CONFIGS / f"{name}.yaml")
        assert cfg.model.cross_attention == cross and cfg.model.decoder == "meshed" and cfg.train.awc.enabled
    assert [model_name(load_config(ExperimentConfig, CONFIGS / f"{n}.yaml").model) for n in ("m2", "m2_caca", "m2_light_caca")] == \
        ["M2", "M2 + CACA", "M2 + LightCACA"]


def test_awc_constrains_every_level_head_of_every_layer():
    cfg = load_config(ExperimentConfig, CONFIGS / "m2_caca_tiny.yaml", ["model.feature_dim=12"])
    assert history_heads(cfg.model) == cfg.model.num_heads * cfg.model.encoder_layers
    awc = make_awc(cfg)
    assert tuple(awc.beta.shape) == (cfg.model.decoder_layers, cfg.model.num_heads * cfg.model.encoder_layers)
    torch.manual_seed(0)
    model = build_captioner(cfg.model, 30)
    captions = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 8, 9, 2]])
    logits, extras = model(torch.randn(2, 4, 12), torch.ones(2, 4, dtype=torch.bool), captions, captions != 0)
    value = awc(extras, (captions != 0)[:, :-1])
    value.backward()
    assert value.ndim == 0 and float(value.detach()) > 0 and awc.beta.grad.shape == awc.beta.shape


def test_config_checks_for_m2_options():
    with pytest.raises(ConfigError, match="model.history.placement='gated' has no effect with decoder 'transformer'"):
        ModelConfig(cross_attention="caca", history=HistoryConfig(placement="gated"))
    with pytest.raises(ConfigError, match="model.history.placement='gated' has no effect on cross_attention 'light_caca'"):
        ModelConfig(decoder="meshed", cross_attention="light_caca", history=HistoryConfig(placement="gated"))
    with pytest.raises(ConfigError, match="model.memory_slots must be >= 0"):
        ModelConfig(encoder="memory_augmented", memory_slots=-1)
    with pytest.raises(ConfigError, match="model.history.placement: expected one of 'per_level', 'gated', found 'after'"):
        load_config(ExperimentConfig, None, ["model.decoder=meshed", "model.cross_attention=caca", "model.history.placement=after"])
    # the Transformer decoder over M2's encoder reads its top level only (M2's "no meshing" ablation)
    cfg = ModelConfig(encoder="memory_augmented", memory_slots=2, d_model=16, num_heads=2, d_ff=32, feature_dim=12)
    model = build_captioner(cfg, 30)
    assert model.decoder.layers[0].cross.mix.levels == 1 and history_heads(cfg) == 2
