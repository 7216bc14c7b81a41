"""Sampling: the inverse-CDF draw follows the distribution; top-k / top-p / temperature rules."""

import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.decoding import greedy, sample
from catcap.decoding.sampling import draw, top_k_filter, top_p_filter
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig


def test_draw_matches_the_probabilities_and_never_draws_impossible_tokens():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 0.0, 1.0]])
    g = torch.Generator().manual_seed(0)
    rows = probs.repeat(20000, 1)
    picks = draw(rows, g).view(20000, 2)
    freq = torch.bincount(picks[:, 0], minlength=5).double() / 20000
    assert freq[0] == 0 and freq[2] == 0
    torch.testing.assert_close(freq, probs[0].double(), atol=0.015, rtol=0)  # ~4 standard errors
    assert bool((picks[:, 1] == 4).all())


def test_filters_keep_the_best_tokens():
    scores = torch.log(torch.tensor([[0.1, 0.4, 0.3, 0.2]]))
    assert torch.isfinite(top_k_filter(scores, 2)).tolist() == [[False, True, True, False]]
    assert torch.isfinite(top_p_filter(scores, 0.6)).tolist() == [[False, True, True, False]]  # 0.4 + 0.3 >= 0.6
    assert torch.isfinite(top_p_filter(scores, 0.3)).tolist() == [[False, True, False, False]]  # the best always kept


def test_top_k_one_is_greedy_and_rows_are_image_major():
    torch.manual_seed(0)
    model = build_captioner(ModelConfig(feature_dim=8, d_model=16, num_heads=2, encoder_layers=1, decoder_layers=1,
                                        d_ff=32, cross_attention="caca"), 20).eval()
    feats, mask = torch.randn(2, 4, 8), torch.ones(2, 4, dtype=torch.bool)
    g = greedy(model, feats, mask, max_len=6)
    s = sample(model, feats, mask, num_samples=3, top_k=1, max_len=6, generator=torch.Generator().manual_seed(1))
    assert s.tokens.shape[0] == 6 and s.group == 3
    for row in range(6):
        width = min(g.tokens.shape[1], s.tokens.shape[1])
        assert s.tokens[row, :width].tolist() == g.tokens[row // 3, :width].tolist()
