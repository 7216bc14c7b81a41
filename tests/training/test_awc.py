"""The adaptive weight constraint: its value against SPEC.md §3, its gradients, its config."""

from pathlib import Path

import pytest
import torch

from catcap.config import ConfigError, load_config
from catcap.models.cross.assist import ContextAssist
from catcap.models.cross.transformer import TransformerCrossAttention
from catcap.training.awc import AdaptiveWeightConstraint, awc_loss, history_stats
from catcap.training.experiment import ExperimentConfig


def by_hand(a, beta, lengths, gamma=0.5, eps=1e-8):
    """L = mean over captions of gamma / (L*H) * sum_{n,h} (1/l) sum_{t<l} (a_t - beta + eps)^2, in plain Python."""
    total = 0.0
    for b, length in enumerate(lengths):
        per_caption = 0.0
        for n in range(len(beta)):
            for h in range(len(beta[0])):
                per_caption += sum((a[b][n][h][t] - beta[n][h] + eps) ** 2 for t in range(length)) / length
        total += gamma / (len(beta) * len(beta[0])) * per_caption
    return total / len(lengths)


def test_value_matches_the_formula_on_hand_made_weights():
    a = [[[[0.1, 0.3, 0.2], [0.0, 0.5, 0.9]]],          # caption 1: 1 layer x 2 heads x 3 steps
         [[[0.4, 0.7, 123.0], [0.2, 0.2, -55.0]]]]      # caption 2: 2 real steps, garbage at the pad
    beta = [[0.2, 0.6]]
    mask = torch.tensor([[True, True, True], [True, True, False]])
    got = awc_loss(torch.tensor(a, dtype=torch.float64), torch.tensor(beta, dtype=torch.float64), mask)
    want = by_hand(a, beta, [3, 2])
    assert abs(float(got) - want) < 1e-12
    # spelled out for caption 2, head 1: ((0.4-0.2)^2 + (0.7-0.2)^2) / 2 = 0.145
    assert abs(want - 0.5 * ((0.01 + 0.01 + 0.0) / 3 + (0.36 + 0.01 + 0.09) / 3 + 0.145 + (0.16 + 0.16) / 2) / 2 / 2) < 1e-8


def test_gradient_reaches_beta_and_the_attention():
    torch.manual_seed(0)
    module = TransformerCrossAttention(8, 2, 0.0, history=ContextAssist())
    q, x = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    _, extras = module(q, module.prepare(x), torch.ones(2, 4, dtype=torch.bool), mask)
    awc = AdaptiveWeightConstraint(num_layers=1, num_heads=2, beta=0.3)
    loss = awc([extras], mask)
    loss.backward()
    assert module.attn.q_proj.weight.grad.abs().sum() > 0 and module.attn.k_proj.weight.grad.abs().sum() > 0
    a = extras["history_weight"].detach()  # (B, H, T)
    m = mask.double()
    # dL/dbeta_h = gamma / H * mean_b (1/l_b) sum_t -2 (a - beta + eps)
    want = 0.5 / 2 * (-2 * ((a.double() - 0.3 + 1e-8) * m[:, None]).sum(-1) / m.sum(-1)[:, None]).mean(0)
    torch.testing.assert_close(awc.beta.grad[0].double(), want, rtol=1e-5, atol=1e-7)


def test_fixed_beta_is_not_learned_and_stats_report_layers():
    fixed = AdaptiveWeightConstraint(3, 4, mode="fixed", beta=0.7)
    assert list(fixed.parameters()) == [] and torch.equal(fixed.beta, torch.full((3, 4), 0.7))
    assert len(list(AdaptiveWeightConstraint(3, 4).parameters())) == 1
    extras = [{"history_weight": torch.full((2, 4, 3), v)} for v in (0.1, 0.2, 0.3)]
    assert history_stats(extras, torch.ones(2, 3, dtype=torch.bool)) == {"history_weight": [0.1, 0.2, 0.3]}
    assert history_stats([{}, {}], torch.ones(2, 3, dtype=torch.bool)) == {}
    with pytest.raises(ValueError, match="mode must be 'adaptive' or 'fixed'"):
        AdaptiveWeightConstraint(1, 1, mode="learned")


def test_awc_needs_a_history_model(tmp_path):
    with pytest.raises(ConfigError, match="train.awc.enabled=true needs a cross attention with a history memory"):
        load_config(ExperimentConfig, None, ["train.awc.enabled=true"])
    cfg = load_config(ExperimentConfig, Path(__file__).resolve().parents[2] / "configs" / "models" / "cat.yaml")
    assert cfg.model.cross_attention == "caca" and cfg.train.awc.enabled and cfg.model.d_model == 512


@pytest.mark.parametrize("cross", ["caca", "light_caca"])
def test_a_captions_awc_term_does_not_depend_on_its_batch(cross):
    """SPEC.md §3 averages over the caption's own steps (padding excluded): the step whose
    input is <eos> predicts padding and must not count, so a short caption's term is the same
    alone and next to a longer one (XE objective and SCST scoring pass)."""
    from types import SimpleNamespace

    from catcap.data.collate import pad_captions
    from catcap.models.builders import build_captioner
    from catcap.models.config import ModelConfig
    from catcap.training.objective import Objective

    torch.manual_seed(0)
    cfg = ModelConfig(cross_attention=cross, feature_dim=6, d_model=16, num_heads=2, encoder_layers=1,
                      decoder_layers=2, d_ff=32, dropout=0.0)
    objective = Objective(build_captioner(cfg, 12).eval(), AdaptiveWeightConstraint(2, 2, "fixed", 0.9), scst_awc=True)
    feats, fmask = torch.randn(1, 4, 6), torch.ones(1, 4, dtype=torch.bool)
    short, longer = torch.tensor([1, 5, 6, 2]), torch.tensor([1, 7, 8, 9, 10, 2])  # <bos> words <eos>

    def xe_awc(caps):
        c, m = pad_captions(caps)
        n = len(caps)
        batch = SimpleNamespace(features=feats.expand(n, -1, -1), feature_mask=fmask.expand(n, -1), captions=c,
                                caption_mask=m)
        return float(objective.xe(batch)["awc"])

    def scst_awc(caps):  # generated tokens after <bos>, mask = words and <eos>
        c, m = pad_captions(caps)
        n = len(caps)
        return float(objective.scst(feats.expand(n, -1, -1), fmask.expand(n, -1), c[:, 1:], m[:, 1:], 1)[4])

    with torch.no_grad():
        for awc_of in (xe_awc, scst_awc):
            alone = [awc_of([short]), awc_of([longer])]
            assert awc_of([short, longer]) == pytest.approx(sum(alone) / 2, rel=1e-5)
