"""Self-critical training: baselines, scored log-probs, the reward and its document frequencies."""

import numpy as np
import pytest
import torch

import catcap.models.cross  # noqa: F401  (registers the cross-attention variants)
from catcap.data.vocab import Vocab
from catcap.decoding import caption_processors, sample
from catcap.metrics.evaluate import evaluate_tokenized
from catcap.models.builders import build_captioner
from catcap.models.config import ModelConfig
from catcap.training.reward import CiderReward, cached_document_frequency
from catcap.training.scst import SCSTConfig, advantages, policy_loss, sequence_log_probs

REWARDS = np.array([[1.0, 0.0, 0.5], [0.2, 0.2, 0.8]])


def test_mean_baseline_is_the_mean_of_the_other_samples():
    base, adv = advantages(REWARDS, "mean")
    np.testing.assert_allclose(base, [[0.25, 0.75, 0.5], [0.5, 0.5, 0.2]])
    np.testing.assert_allclose(adv, [[0.75, -0.75, 0.0], [-0.3, -0.3, 0.6]])


def test_greedy_and_beam_baselines():
    base, adv = advantages(REWARDS, "greedy", greedy_rewards=np.array([0.4, 0.9]))
    np.testing.assert_allclose(base, [[0.4] * 3, [0.9] * 3])
    np.testing.assert_allclose(adv, [[0.6, -0.4, 0.1], [-0.7, -0.7, -0.1]])
    base, adv = advantages(REWARDS, "beam")
    np.testing.assert_allclose(base, [[0.5] * 3, [0.4] * 3])
    np.testing.assert_allclose(adv, [[0.5, -0.5, 0.0], [-0.2, -0.2, 0.4]])
    with pytest.raises(ValueError, match="greedy baseline needs the rewards of the greedy captions"):
        advantages(REWARDS, "greedy")


def test_config_rejects_a_mean_baseline_with_one_sample():
    from catcap.config import ConfigError

    with pytest.raises(ConfigError, match="num_samples must be >= 2 for the 'mean' baseline, found 1"):
        SCSTConfig(baseline="mean", num_samples=1)


ARCHS = {"transformer": {}, "m2": dict(encoder="memory_augmented", decoder="meshed", memory_slots=3, encoder_layers=2),
         "updown": dict(encoder="embed", decoder="updown", decoder_layers=1),
         "aoa": dict(encoder="aoa_refiner", decoder="aoa", decoder_layers=1)}


def tiny(cross, arch="transformer"):
    """A tiny Transformer / CAT / LightCAT, or the same cross attention in M2 (2 encoder levels)
    or in Up-Down (soft attention) or AoANet (its multi-head attention)."""
    torch.manual_seed(0)
    parts = ARCHS[arch]
    cfg = ModelConfig(**{"cross_attention": cross, "feature_dim": 12, "d_model": 16, "num_heads": 2, "encoder_layers": 1,
                         "decoder_layers": 2, "d_ff": 32, **parts})
    return build_captioner(cfg, 30)


@pytest.mark.parametrize("arch", ["transformer", "m2", "updown", "aoa"])
@pytest.mark.parametrize("cross", ["vanilla", "caca", "light_caca"])
def test_scored_log_probs_equal_those_of_sampling(cross, arch):
    """One teacher-forced pass over the n samples of each image (grouped rows sharing the
    image's memory of every encoder level) gives the log-probs the cached sampler saw (eval mode)."""
    model = tiny(cross, arch).eval()
    features, mask = torch.randn(3, 5, 12), torch.ones(3, 5, dtype=torch.bool)
    mask[2, 3:] = False
    with torch.no_grad():
        out = sample(model, features, mask, num_samples=4, max_len=7, generator=torch.Generator().manual_seed(1))
        scored, entropy, _, _ = sequence_log_probs(model, features, mask, out.tokens, out.mask, 4)
    assert out.mask.sum(1).min() >= 1 and int(out.mask.sum(1).max()) > 1
    torch.testing.assert_close(scored, out.token_log_probs, rtol=1e-5, atol=1e-5)
    assert bool((entropy[out.mask] > 0).all()) and bool((entropy[~out.mask] == 0).all())


def test_a_positive_advantage_makes_the_caption_more_likely():
    model = tiny("caca")
    features, mask = torch.randn(1, 5, 12), torch.ones(1, 5, dtype=torch.bool)
    tokens, tmask = torch.tensor([[7, 8, 9, 2], [10, 11, 2, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model.eval()  # no dropout, so the change comes from the update only
    before, _, _, _ = sequence_log_probs(model, features, mask, tokens, tmask, 2)
    loss = policy_loss(before, torch.tensor([1.0, -1.0]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        after, _, _, _ = sequence_log_probs(model, features, mask, tokens, tmask, 2)
    before = before.detach()
    assert float(after[0].sum()) > float(before[0].sum())  # rewarded caption up
    assert float(after[1].sum()) < float(before[1].sum())  # penalised caption down


def test_processors_never_sample_special_tokens():
    vocab = Vocab.build([["a", "b"]], min_count=1)
    (rule,) = caption_processors(vocab)  # SCST's sampling rules (draw_captions: generate(vocab=))
    out = rule(torch.zeros(2, len(vocab)), torch.zeros(2, 0, dtype=torch.long), 0)
    assert torch.isneginf(out[:, [vocab.pad_id, vocab.bos_id, vocab.unk_id]]).all()
    assert torch.isfinite(out[:, vocab.eos_id]).all()


REFS = [[["a", "red", "circle"], ["a", "circle", "that", "is", "red"]],
        [["two", "blue", "squares"], ["blue", "squares", "two", "of", "them"]],
        [["a", "green", "star", "on", "the", "left"], ["green", "star"]]]


def test_reward_is_the_evaluation_cider_d_when_df_comes_from_the_same_references(tmp_path):
    df, path = cached_document_frequency(REFS, tmp_path / "data" / "ds.json", "train", tmp_path / "out", log=lambda *_: None)
    candidates = [["a", "red", "circle"], ["blue", "squares"], ["a", "star"], ["a", "circle"]]
    rewards = CiderReward(df)(candidates, REFS, [0, 1, 2, 0])
    ev = evaluate_tokenized([0, 1, 2], candidates[:3], REFS, ("cider",))
    np.testing.assert_allclose(rewards[:3], [ev.per_image["CIDEr"][i] for i in (0, 1, 2)], rtol=1e-12)
    assert rewards[0] > rewards[3] > 0


def test_document_frequencies_are_built_once_and_keyed_by_the_references(tmp_path):
    messages = []
    dataset = tmp_path / "data" / "ds.json"
    dataset.parent.mkdir()
    _, first = cached_document_frequency(REFS, dataset, "train", tmp_path / "out", log=messages.append)
    _, again = cached_document_frequency(REFS, dataset, "train", tmp_path / "out", log=messages.append)
    assert first == again and first.parent == dataset.parent and len(messages) == 1
    assert first.name.startswith("ds.train.") and first.name.endswith(".cider-df.npz")
    changed = [REFS[0], REFS[1], [["a", "yellow", "star"]]]
    _, other = cached_document_frequency(changed, dataset, "train", tmp_path / "out", log=messages.append)
    assert other != first and len(messages) == 2


def test_an_eos_forced_at_max_len_is_no_choice_of_the_sampler():
    """A caption cut at max_len gets its <eos> forced (probability 1 under the sampling rule):
    no policy-gradient term for it, and it does not count as having ended by itself."""
    from types import SimpleNamespace

    from catcap.training.scst import chosen_mask, scst_loss

    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)  # max_len 3: row 1 was cut
    assert chosen_mask(mask, 3).tolist() == [[True, True, True, False], [True, True, True, False]]
    assert chosen_mask(mask, 4) is mask
    vocab = Vocab.build([[f"w{i}" for i in range(26)]], min_count=1)
    model = tiny("caca")
    assert len(vocab) == model.decoder.output.out_features
    with torch.no_grad():
        model.decoder.output.bias[vocab.eos_id] = -40.0  # never ends by itself
    calls = iter([1.0, 0.0])  # samples rewarded 1, the greedy baseline 0: every advantage is 1

    def reward(cands, refs, image_of):
        return np.full(len(cands), next(calls))

    batch = SimpleNamespace(features=torch.randn(2, 5, 12), feature_mask=torch.ones(2, 5, dtype=torch.bool),
                            references=[[["w1"]], [["w2"]]])
    model.eval()  # no dropout: the gradient below comes from the chosen tokens only
    loss, record = scst_loss(model, batch, vocab, SCSTConfig(baseline="greedy", num_samples=2, max_len=4), reward)
    model.eval()
    loss.backward()
    assert record["eos_fraction"] == 0.0 and record["length"] == 4.0
    # with the forced <eos> in the sum, d loss / d bias[eos] would be about -1 (one term per caption)
    assert abs(float(model.decoder.output.bias.grad[vocab.eos_id])) < 1e-6
