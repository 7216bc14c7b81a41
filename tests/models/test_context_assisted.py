"""CACA / LightCACA against SPEC.md §3 written out step by step, masks by hand, parameters."""

import math

import pytest
import torch

from catcap.models.builders import build_captioner
from catcap.models.config import HistoryConfig, ModelConfig
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.transformer import TransformerCrossAttention

D, H, N, T = 8, 2, 3, 4


def cross(light=False, strategy="chc", shared=True, normalize=True, dropout=0.0):
    """CAT's cross attention (LightCACA with ``light``) at width D with H heads."""
    return TransformerCrossAttention(D, H, dropout, history=ContextAssist(light, strategy, shared, normalize))


def history_mask(query_mask, strategy):
    return ContextAssist(strategy=strategy).history_mask(query_mask)


def mha(attn, query, keys, allowed=None):
    """MHA(Q, K, V) of SPEC.md §2 with the module's weights, by hand: query (T, D), keys (M, D)."""
    q, k, v = attn.q_proj(query), attn.k_proj(keys), attn.v_proj(keys)
    d_k = D // H
    heads, weights = [], []
    for h in range(H):
        part = slice(h * d_k, (h + 1) * d_k)
        scores = q[:, part] @ k[:, part].T / math.sqrt(d_k)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        w = scores.softmax(-1)
        heads.append(w @ v[:, part])
        weights.append(w)
    return attn.out_proj(torch.cat(heads, -1)), torch.stack(weights)


def spec_caca(module, q, x, strategy, light=False, normalize=True):
    """Step-by-step CACA / LightCACA for one caption: q (T, D), x (N, D) -> c (T, D), a (H, T).
    With ``normalize`` the history entries go through the final pass's LayerNorm."""
    norm2 = module.norm if light or module.history.shared else module.final_norm
    attn2 = module.attn if light or module.history.shared else module.final_attn
    memory, outputs, history_weight = [], [], []
    for t in range(q.shape[0]):
        q_ln = module.norm(q[t:t + 1])
        entry = q[t:t + 1] if light else q[t:t + 1] + mha(module.attn, q_ln, x)[0]
        entry = norm2(entry) if normalize else entry
        before = list(memory)
        memory.append(entry)
        visible = before if strategy == "ihc" else memory
        regions = [] if strategy == "ohc" else [x]
        keys = torch.cat(regions + visible, 0)
        out, w = mha(attn2, norm2(q[t:t + 1]), keys)
        outputs.append(q[t:t + 1] + out)
        n = 0 if strategy == "ohc" else x.shape[0]
        history_weight.append(w[:, 0, n:].sum(-1))
    return torch.cat(outputs), torch.stack(history_weight, 1)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("light, strategy, shared", [
    (False, "chc", True), (False, "ihc", True), (False, "ohc", True), (False, "chc", False), (False, "ohc", False),
    (True, "chc", True), (True, "ihc", True), (True, "ohc", True),
])
def test_parallel_module_equals_the_specification(light, strategy, shared, normalize):
    torch.manual_seed(0)
    module = cross(light, strategy, shared, normalize).eval()
    with torch.no_grad():  # LayerNorms that are not the identity, so that a wrong one is caught
        for norm in [m for m in module.modules() if isinstance(m, torch.nn.LayerNorm)]:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
    q, x = torch.randn(2, T, D), torch.randn(2, N, D)
    memory_mask = torch.tensor([[True, True, True], [True, True, False]])
    query_mask = torch.tensor([[True] * T, [True, True, False, False]])
    with torch.no_grad():
        c, extras = module(q, module.prepare(x), memory_mask, query_mask)
        for b in range(2):
            n, t = int(memory_mask[b].sum()), int(query_mask[b].sum())
            want_c, want_a = spec_caca(module, q[b, :t], x[b, :n], strategy, light, normalize)
            torch.testing.assert_close(c[b, :t], want_c, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(extras["history_weight"][b, :, :t], want_a, rtol=1e-5, atol=1e-6)


def test_history_masks_written_out_by_hand():
    real = torch.tensor([[True, True, True, False]])  # a 3-word caption padded to 4
    chc = [[1, 0, 0, 0],
           [1, 1, 0, 0],
           [1, 1, 1, 0],    # no real query sees the padded entry 4
           [1, 1, 1, 1]]    # the padded query also sees itself, so no row is empty (output unused)
    ihc = [[0, 0, 0, 0],   # the first word sees regions only
           [1, 0, 0, 0],
           [1, 1, 0, 0],
           [1, 1, 1, 1]]
    assert history_mask(real, "chc")[0, 0].int().tolist() == chc
    assert history_mask(real, "ohc")[0, 0].int().tolist() == chc  # ohc: the same entries, no regions
    assert history_mask(real, "ihc")[0, 0].int().tolist() == ihc


@pytest.mark.parametrize("light, strategy, regions_seen", [
    (False, "chc", True), (False, "ihc", True), (False, "ohc", False), (True, "chc", True),
])
def test_final_pass_weights_follow_the_masks(light, strategy, regions_seen):
    torch.manual_seed(1)
    module = cross(light, strategy).eval()
    q, x = torch.randn(1, T, D), torch.randn(1, N, D)
    memory_mask, query_mask = torch.tensor([[True, True, False]]), torch.tensor([[True, True, True, False]])
    with torch.no_grad():
        _, extras = module(q, module.prepare(x), memory_mask, query_mask)
    hist = extras["history_attention"][0, :, :3]  # (H, real queries, entries)
    allowed = history_mask(query_mask, strategy)[0, 0, :3]
    assert bool((hist[:, ~allowed] == 0).all()) and bool((hist[:, allowed] > 0).all())
    if regions_seen:
        regions = extras["region_attention"][0, :, :3]
        assert bool((regions[..., 2] == 0).all()) and bool((regions[..., :2] > 0).all())  # padded region unseen
        torch.testing.assert_close(regions.sum(-1) + hist.sum(-1), torch.ones(H, 3))
    else:
        assert extras["region_attention"] is None
        torch.testing.assert_close(extras["history_weight"][0, :, :3], torch.ones(H, 3))


def count(model):
    return sum(p.numel() for p in model.parameters())


def test_shared_adds_no_parameters_and_not_shared_adds_one_layernorm_and_attention_per_layer():
    base = ModelConfig(d_model=32, num_heads=4, d_ff=64, feature_dim=16, decoder_layers=3)
    vanilla = count(build_captioner(base, 50))
    for cross in ("caca", "light_caca"):
        assert count(build_captioner(ModelConfig(**{**base.__dict__, "cross_attention": cross}), 50)) == vanilla
    for strategy in ("chc", "ihc", "ohc"):
        cfg = ModelConfig(**{**base.__dict__, "cross_attention": "caca", "history": HistoryConfig(strategy, shared=False)})
        layer_norm, attention = 2 * 32, 4 * (32 * 32 + 32)
        assert count(build_captioner(cfg, 50)) == vanilla + 3 * (layer_norm + attention)


def test_options_a_variant_ignores_are_rejected():
    from catcap.config import ConfigError

    with pytest.raises(ConfigError, match="model.history.shared=False has no effect on cross_attention 'light_caca'"):
        build_captioner(ModelConfig(cross_attention="light_caca", history=HistoryConfig(shared=False)), 50)
    with pytest.raises(ConfigError, match="model.history.strategy='ohc' has no effect on cross_attention 'vanilla'"):
        build_captioner(ModelConfig(history=HistoryConfig(strategy="ohc")), 50)
    with pytest.raises(ValueError, match="history strategy must be one of chc, ihc, ohc, got 'all'"):
        ContextAssist(strategy="all")


@pytest.mark.parametrize("strategy", ["chc", "ihc", "ohc"])
def test_one_score_pass_equals_two_separate_passes(strategy):
    """Shared-weight CACA reuses the first pass's region scores (exact algebra); an unshared
    CACA whose final pass has the same weights computes both passes separately (as training
    with attention dropout does) and must give the same outputs, in parallel and step by step."""
    torch.manual_seed(2)
    module, separate = cross(strategy=strategy).eval(), cross(strategy=strategy, shared=False).eval()
    separate.load_state_dict({**module.state_dict(), **{f"final_{k}": v for k, v in module.state_dict().items()
                                                       if k.startswith(("norm.", "attn."))}})
    q, x = torch.randn(2, T, D), torch.randn(2, N, D)
    memory_mask = torch.tensor([[True, True, True], [True, False, False]])
    query_mask = torch.tensor([[True] * T, [True, True, True, False]])
    with torch.no_grad():
        fast_c, fast = module(q, module.prepare(x), memory_mask, query_mask)
        cache, fast_steps = module.init_cache(2), []
        for t in range(T):
            c, cache, _ = module.step(q[:, t:t + 1], module.prepare(x), memory_mask, cache, 1)
            fast_steps.append(c)
        slow_c, slow = separate(q, separate.prepare(x), memory_mask, query_mask)
    torch.testing.assert_close(fast_c[query_mask], slow_c[query_mask], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat(fast_steps, 1)[0], slow_c[0], rtol=1e-5, atol=1e-6)
    real = query_mask[:, None, :].expand(-1, H, -1)
    torch.testing.assert_close(fast["history_weight"][real], slow["history_weight"][real], rtol=1e-5, atol=1e-6)
    if strategy != "ohc":
        torch.testing.assert_close(fast["region_attention"][real], slow["region_attention"][real], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("group", [1, 3])
def test_blockwise_attention_equals_one_softmax_over_the_concatenation(group):
    """attend_regions + attend_after_regions (eval path) == attend_with_history (dropout path)
    == plain softmax over [regions; history] keys, per row."""
    from catcap.models.attention import KeyValue
    from catcap.models.cross.history import attend_after_regions, attend_regions, attend_with_history

    torch.manual_seed(3)
    b, h, t, n, m, d_k = 2, 2, 4, 5, 6, 3
    rows = b * group
    q = torch.randn(rows, h, t, d_k)
    regions = KeyValue(torch.randn(b, h, n, d_k), torch.randn(b, h, n, d_k))
    history = KeyValue(torch.randn(rows, h, m, d_k), torch.randn(rows, h, m, d_k))
    region_mask = torch.tensor([[True] * n, [True, True, False, False, False]])
    history_mask = torch.rand(rows, 1, t, m) > 0.4
    history_mask[..., 0] = True
    one = attend_with_history(q, regions, region_mask, history, history_mask, group)
    blocks = attend_after_regions(q, attend_regions(q, regions, region_mask, group), history, history_mask)
    torch.testing.assert_close(blocks.heads, one.heads, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(blocks.history_weight, one.history_weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(blocks.region_weights, one.region_weights, rtol=1e-5, atol=1e-6)
    for r in range(rows):  # by hand for every row
        img = r // group
        keys = torch.cat([regions.k[img], history.k[r]], 1)
        values = torch.cat([regions.v[img], history.v[r]], 1)
        allowed = torch.cat([region_mask[img].expand(t, n), history_mask[r, 0]], 1)
        w = (q[r] @ keys.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~allowed, float("-inf")).softmax(-1)
        torch.testing.assert_close(one.heads[r], w @ values, rtol=1e-5, atol=1e-6)

