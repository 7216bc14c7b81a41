import torch

from catcap.models.attention import MultiHeadAttention, attend, causal_mask


def test_fast_and_explicit_paths_agree_and_masks_mean_may_attend():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])[:, None, :]
    kv = mha.project_kv(mem)
    fast, _ = mha(x, kv, mask)
    slow, weights = mha(x, kv, mask, need_weights=True)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    assert weights.shape == (2, 4, 3, 5)
    assert torch.all(weights[0, :, :, 3:] == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 3))
    # masked keys do not influence the output at all
    mem2 = mem.clone()
    mem2[0, 3:] = 100.0
    torch.testing.assert_close(mha(x, mha.project_kv(mem2), mask)[0][0], fast[0], rtol=1e-5, atol=1e-6)


def test_hand_computed_single_head():
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[10.0, 0.0], [0.0, 10.0]]]])
    out, w = attend(q, k, v, None, need_weights=True)
    p = torch.softmax(torch.tensor([1 / 2**0.5, 0.0]), 0)
    torch.testing.assert_close(w[0, 0, 0], p)
    torch.testing.assert_close(out[0, 0, 0], 10 * p)


def test_incremental_cache_equals_causal_self_attention():
    torch.manual_seed(1)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 6, 8)
    full, _ = mha(x, mha.project_kv(x), causal_mask(6)[None])
    cache, steps = None, []
    for t in range(6):
        new = mha.project_kv(x[:, t:t + 1])
        cache = new if cache is None else cache.cat(new)
        steps.append(mha(x[:, t:t + 1], cache)[0])
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)


def test_grouped_queries_equal_per_hypothesis_memory_copies():
    """G one-token queries of an image attending as a group == copying memory per hypothesis."""
    torch.manual_seed(2)
    mha = MultiHeadAttention(8, 2).eval()
    b, g, m = 2, 3, 4
    mem, q = torch.randn(b, m, 8), torch.randn(b * g, 1, 8)
    mask = torch.tensor([[True, True, False, False], [True] * 4])
    grouped, _ = mha(q.view(b, g, 8), mha.project_kv(mem), mask[:, None, :])
    copied, _ = mha(q, mha.project_kv(mem.repeat_interleave(g, 0)), mask.repeat_interleave(g, 0)[:, None, :])
    torch.testing.assert_close(grouped.reshape(b * g, 1, 8), copied, rtol=1e-5, atol=1e-6)


def test_key_value_cat_equals_torch_cat_for_any_layout():
    from catcap.models.attention import KeyValue

    torch.manual_seed(2)
    old = KeyValue(torch.randn(3, 2, 4, 5), torch.randn(3, 2, 4, 5))
    new = KeyValue(*(torch.randn(3, 1, 2, 5).transpose(1, 2) for _ in range(2)))  # head-split views
    grown = old.cat(new)
    assert grown.k.is_contiguous() and grown.length == 5
    torch.testing.assert_close(grown.k, torch.cat([old.k, new.k], dim=2), rtol=0, atol=0)
    torch.testing.assert_close(grown.v, torch.cat([old.v, new.v], dim=2), rtol=0, atol=0)
