"""mml's layers on inputs of our own, in eval mode (no dropout), against formulas written out."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from mml.classifiers.transformer import CaptioningTransformer, TransformerDecoderLayer
from mml.transformer_layers import MultiHeadAttention, PositionalEncoding


def attention_reference(attn, query, key, value, mask=None):
    """Per-head loops over the notebook's formula Y_h = softmax(Q_h K_h^T / sqrt(E/H)) V_h."""
    n, s, e = query.shape
    h = attn.n_head
    d = e // h
    q, k, v = attn.query(query), attn.key(key), attn.value(value)
    out = torch.zeros(n, s, e, dtype=query.dtype)
    for b in range(n):
        for head in range(h):
            cols = slice(head * d, (head + 1) * d)
            logits = q[b, :, cols] @ k[b, :, cols].T / math.sqrt(d)
            if mask is not None:
                m = mask if mask.dim() == 2 else mask[b]
                logits = logits.masked_fill(m == 0, float("-inf"))
            out[b, :, cols] = torch.softmax(logits, dim=-1) @ v[b, :, cols]
    return attn.proj(out)


@pytest.fixture
def attn():
    torch.manual_seed(0)
    return MultiHeadAttention(12, num_heads=3).double().eval()


def test_self_and_cross_attention_match_the_formula(attn):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 12, generator=g, dtype=torch.float64)
    y = torch.randn(2, 7, 12, generator=g, dtype=torch.float64)
    torch.testing.assert_close(attn(x, x, x), attention_reference(attn, x, x, x))
    torch.testing.assert_close(attn(x, y, y), attention_reference(attn, x, y, y))
    assert attn(x, y, y).shape == (2, 5, 12)


def test_masks_true_or_one_means_may_attend(attn):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 12, generator=g, dtype=torch.float64)
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    per_image = torch.rand(2, 4, 4, generator=g) < 0.6
    per_image[:, :, 0] = True                           # every query sees something
    torch.testing.assert_close(attn(x, x, x, attn_mask=causal), attention_reference(attn, x, x, x, causal))
    torch.testing.assert_close(attn(x, x, x, attn_mask=causal.long()), attn(x, x, x, attn_mask=causal))
    torch.testing.assert_close(attn(x, x, x, attn_mask=per_image), attention_reference(attn, x, x, x, per_image))
    # a key that no query may see can change freely without changing the output
    changed = x.clone()
    changed[:, 3] += 10.0
    torch.testing.assert_close(attn(x, changed, changed, attn_mask=causal)[:, :3],
                               attn(x, x, x, attn_mask=causal)[:, :3])


def test_attention_construction_order_and_names():
    torch.manual_seed(231)
    attn = MultiHeadAttention(8, num_heads=2)
    torch.manual_seed(231)
    linears = [nn.Linear(8, 8) for _ in range(4)]
    for name, ref in zip(["key", "query", "value", "proj"], linears):
        assert torch.equal(getattr(attn, name).weight, ref.weight), name
    assert [n for n, _ in attn.named_children()] == ["key", "query", "value", "proj", "attn_drop"]
    assert attn.attn_drop.p == 0.1


def test_attention_bad_input_says_what_to_fix(attn):
    with pytest.raises(ValueError, match=r"\(N, L, 12\).*unsqueeze"):
        attn(torch.randn(5, 12), torch.randn(5, 12), torch.randn(5, 12))
    x = torch.randn(1, 3, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"attn_mask must have shape \(S, T\) = \(3, 3\)"):
        attn(x, x, x, attn_mask=torch.ones(4, 4))
    with pytest.raises(ValueError, match="multiple of num_heads"):
        MultiHeadAttention(10, num_heads=3)


def test_positional_encoding_formula_and_eval_mode():
    pe = PositionalEncoding(10, max_len=7).eval()
    table = pe.pe[0]
    for i in range(7):
        for k in range(5):
            angle = i * 10000 ** (-2 * k / 10)
            assert table[i, 2 * k].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[i, 2 * k + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    x = torch.randn(3, 5, 10)
    torch.testing.assert_close(pe(x), x + table[:5])
    with pytest.raises(ValueError, match="exceeds max_len=7"):
        pe(torch.randn(1, 8, 10))
    with pytest.raises(ValueError, match="even embed_dim"):
        PositionalEncoding(7)


def test_decoder_layer_is_post_norm():
    torch.manual_seed(4)
    layer = TransformerDecoderLayer(input_dim=8, num_heads=2, dim_feedforward=16).double().eval()
    x = torch.randn(2, 3, 8, dtype=torch.float64)
    memory = torch.randn(2, 1, 8, dtype=torch.float64)
    mask = torch.tril(torch.ones(3, 3, dtype=torch.bool))
    a = layer.norm1(x + attention_reference(layer.self_attn, x, x, x, mask))
    b = layer.norm2(a + attention_reference(layer.multihead_attn, a, memory, memory))
    c = layer.norm3(b + layer.linear2(torch.relu(layer.linear1(b))))
    torch.testing.assert_close(layer(x, memory, tgt_mask=mask), c)


WORDS = {"<NULL>": 0, "<START>": 1, "<END>": 2, "<UNK>": 3, "cat": 4, "dog": 5}


def test_model_names_order_and_init():
    torch.manual_seed(0)
    model = CaptioningTransformer(WORDS, input_dim=6, wordvec_dim=8, num_heads=2, num_layers=2, max_length=9)
    names = [n for n, _ in model.named_parameters()]
    assert names[:4] == ["visual_projection.weight", "visual_projection.bias", "embedding.weight",
                         "transformer.layers.0.self_attn.key.weight"]
    assert names[-2:] == ["output.weight", "output.bias"]
    layer_params = [n.split(".", 3)[3] for n in names if n.startswith("transformer.layers.1.")]
    expected = [f"{a}.{p}.{w}" for a in ("self_attn", "multihead_attn") for p in ("key", "query", "value", "proj")
                for w in ("weight", "bias")]
    expected += ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    expected += [f"norm{i}.{w}" for i in (1, 2, 3) for w in ("weight", "bias")]
    assert layer_params == expected
    children = [n for n, _ in model.transformer.layers[0].named_children()]
    assert children[:9] == ["self_attn", "multihead_attn", "linear1", "dropout", "linear2",
                            "norm1", "norm2", "norm3", "dropout1"]
    assert model.transformer.layers[0].linear1.out_features == 2048
    assert "positional_encoding.pe" in model.state_dict()
    assert model.transformer.layers[0].self_attn.proj.bias.abs().max() == 0
    assert model.transformer.layers[1].norm2.weight.eq(1).all()
    assert model.output.bias.abs().max() > 0              # created after the N(0, 0.02) init
    big = CaptioningTransformer(WORDS, input_dim=6, wordvec_dim=256, num_heads=2, num_layers=1)
    assert big.transformer.layers[0].linear1.weight.std().item() == pytest.approx(0.02, rel=0.02)


def test_scores_are_causal_and_sample_is_greedy():
    torch.manual_seed(0)
    model = CaptioningTransformer(WORDS, input_dim=6, wordvec_dim=8, num_heads=2, num_layers=2, max_length=9).eval()
    features = torch.randn(3, 6)
    captions = torch.tensor([[1, 4, 5, 2], [1, 5, 5, 0], [1, 4, 0, 0]])
    scores = model(features, captions)
    assert scores.shape == (3, 4, 6)
    other = captions.clone()
    other[:, 3] = 4
    torch.testing.assert_close(model(features, other)[:, :3], scores[:, :3])
    model.train()
    sampled = model.sample(features.numpy(), max_length=5)
    assert model.training and sampled.dtype == np.int32 and sampled.shape == (3, 5)
    words = torch.cat([torch.ones(3, 1, dtype=torch.long), torch.as_tensor(sampled[:, :4]).long()], dim=1)
    model.eval()
    with torch.no_grad():
        best = model(features, words).argmax(-1).numpy()
    assert (best == sampled).all()


def test_model_bad_input_says_what_to_fix():
    model = CaptioningTransformer(WORDS, input_dim=6, wordvec_dim=8, num_heads=2, max_length=4)
    with pytest.raises(ValueError, match=r"features must be \(N, 6\)"):
        model(torch.randn(2, 5), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_length=4"):
        model(torch.randn(2, 6), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="'<NULL>'"):
        CaptioningTransformer({"a": 0}, input_dim=6, wordvec_dim=8)
    with pytest.raises(ValueError, match="'<START>'"):
        CaptioningTransformer({"<NULL>": 0, "a": 1}, input_dim=6, wordvec_dim=8).sample(np.zeros((1, 6)))
