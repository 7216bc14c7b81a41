"""VLP's masked-token prediction: the masking rates over many draws, what is never masked, the
loss, and the model's masked pass under both masks (seq2seq agrees with cached generation)."""

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner

from catcap.models.vlp import MASK_ID
from catcap.training.mlm import mask_tokens, masked_lm_loss

V, FIRST_WORD = 1000, 4


def test_masking_rates_over_many_draws_and_what_is_never_masked():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(FIRST_WORD, V, (2000, 50), generator=g)
    maskable = torch.rand(2000, 50, generator=g) < 0.7  # e.g. padding and specials are not maskable
    inputs, selected = mask_tokens(tokens, maskable, V, FIRST_WORD, 0.15, g)
    assert not bool(selected[~maskable].any()) and torch.equal(inputs[~maskable], tokens[~maskable])
    assert torch.equal(inputs[~selected], tokens[~selected])
    n = int(maskable.sum())  # ~70,000 maskable positions
    assert int(selected.sum()) / n == pytest.approx(0.15, abs=0.005)
    chosen, original = inputs[selected], tokens[selected]
    k = chosen.numel()
    as_mask = (chosen == MASK_ID).float().mean().item()
    replaced = ((chosen != MASK_ID) & (chosen != original)).float().mean().item()
    kept = (chosen == original).float().mean().item()
    # a random word equals the original with probability 1/996: kept = 0.1 + 0.1/996
    assert as_mask == pytest.approx(0.8, abs=4 / k ** 0.5)
    assert replaced == pytest.approx(0.1 * (1 - 1 / (V - FIRST_WORD)), abs=3 / k ** 0.5)
    assert kept == pytest.approx(0.1 + 0.1 / (V - FIRST_WORD), abs=3 / k ** 0.5)
    assert int(chosen[chosen != MASK_ID].min()) >= FIRST_WORD  # random words are never special tokens


def test_loss_averages_over_selected_positions_only():
    logits = torch.zeros(1, 3, 4)
    logits[0, 0, 2] = 10.0  # position 0 predicts its target 2 almost surely
    targets = torch.tensor([[2, 1, 3]])
    selected = torch.tensor([[True, False, True]])
    expected = (torch.log_softmax(logits[0, 0], -1)[2] + torch.log_softmax(logits[0, 2], -1)[3]) / -2
    torch.testing.assert_close(masked_lm_loss(logits, targets, selected), expected)
    none = masked_lm_loss(logits.requires_grad_(), targets, torch.zeros_like(selected))
    assert float(none.detach()) == 0.0 and none.requires_grad


def test_bad_rate_is_refused():
    with pytest.raises(ValueError, match="masking rate must be in \\(0, 1\\], found 0"):
        mask_tokens(torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.bool), V, FIRST_WORD, 0)


@torch.no_grad()
def test_masked_pass_sees_the_future_only_under_the_bidirectional_mask():
    model = tiny_captioner("vlp")
    features, fmask = torch.randn(1, 4, F), torch.ones(1, 4, dtype=torch.bool)
    memory, mask = model.encode(features, fmask)
    a = torch.tensor([[5, MASK_ID, 7, 8]])
    b = torch.tensor([[5, MASK_ID, 7, 9]])  # the last word differs
    real = torch.ones(1, 4, dtype=torch.bool)
    s2s = [model.decoder.masked_lm(memory, mask, x, real, "seq2seq") for x in (a, b)]
    bi = [model.decoder.masked_lm(memory, mask, x, real, "bidirectional") for x in (a, b)]
    torch.testing.assert_close(s2s[0][:, :3], s2s[1][:, :3])  # words 1..3 never see word 4
    assert not torch.allclose(bi[0][:, 1], bi[1][:, 1])  # [MASK] at 2 sees word 4


@torch.no_grad()
def test_seq2seq_masked_pass_predicts_what_generation_predicts():
    """[w_1, w_2, [MASK]] under the seq2seq mask gives at [MASK] the cached decoder's step-3 logits."""
    model = tiny_captioner("vlp")
    features, fmask = torch.randn(2, 4, F), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    memory, mask = model.encode(features, fmask)
    state = model.init_state(memory, mask, 1)
    for token in ([1, 1], [5, 8], [6, 9]):
        logits, state = model.step(torch.tensor(token), state)
    masked = model.decoder.masked_lm(memory, mask, torch.tensor([[5, 6, MASK_ID], [8, 9, MASK_ID]]),
                                     torch.ones(2, 3, dtype=torch.bool), "seq2seq")
    torch.testing.assert_close(masked[:, 2], logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("overrides, message", [
    ({"model.decoder": "transformer"}, "pre-trains the one-stream VLP model \\(model.decoder=vlp\\), found model.decoder='transformer'"),
    ({"train.scheduled_sampling.enabled": "true"}, "does not combine with train.scheduled_sampling.enabled"),
    ({"train.objective": "xe_then_scst", "train.label_smoothing": 0.1},
     "does not combine with train.objective != xe, train.label_smoothing > 0"),
    ({"train.mlm.rate": 0}, "train.mlm.rate is the share of words masked, in \\(0, 1\\]; found 0"),
    ({"train.mlm.seq2seq_ratio": 1.5}, "train.mlm.seq2seq_ratio is a probability; found 1.5"),
])
def test_config_refuses_what_pre_training_cannot_do(overrides, message):
    from catcap.config import ConfigError, load_config
    from catcap.training.experiment import ExperimentConfig
    from pathlib import Path

    base = {"model.encoder": "vlp_regions", "model.decoder": "vlp", "train.mlm.enabled": "true", **overrides}
    config = Path(__file__).resolve().parents[2] / "configs" / "models" / "vlp_small.yaml"
    with pytest.raises(ConfigError, match=message):
        load_config(ExperimentConfig, config, [f"{k}={v}" for k, v in base.items()])


def test_masks_depend_on_the_seed_alone():
    from catcap.training.mlm import MLMConfig, masked_batch

    captions = torch.tensor([[1, 5, 6, 7, 2, 0], [1, 8, 2, 0, 0, 0]])
    a, b, c = (masked_batch(captions, captions != 0, 30, MLMConfig(rate=0.5), seed) for seed in (3, 3, 4))
    assert torch.equal(a[2], b[2]) and torch.equal(a[3], b[3]) and a[4] == b[4]
    assert not (torch.equal(a[3], c[3]) and a[4] == c[4])
    assert not bool(a[3][captions[:, 1:] == 0].any())  # padding is never selected
