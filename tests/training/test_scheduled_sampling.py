"""Scheduled sampling: the probability ramp, p = 0 is teacher forcing, p = 1 is free-running
decoding, and a training run logs the probability it used."""

import json

import pytest
import torch

from tiny_models import FEATURES as F
from tiny_models import tiny_captioner
from tiny_runs import tiny_run_overrides

from catcap import api
from catcap.config import ConfigError
from catcap.data.synthetic import make_world
from catcap.decoding import greedy
from catcap.training.scheduled_sampling import ScheduledSamplingConfig, sampling_probability, scheduled_forward

ARCHS = [("updown", "caca"), ("att2in", "vanilla"), ("lookback", "light_caca"), ("aoa", "caca"), ("transformer", "caca")]


def batch():
    g = torch.Generator().manual_seed(3)
    features = torch.randn(3, 5, F, generator=g)
    fmask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    captions = torch.tensor([[1, 5, 6, 7, 8, 9, 2], [1, 9, 10, 2, 0, 0, 0], [1, 11, 12, 13, 2, 0, 0]])
    return features, fmask, captions


def test_probability_ramps_as_the_anchors_do():
    cfg = ScheduledSamplingConfig(enabled=True, start=0, every=5, increase=0.05, max_prob=0.25)
    got = [sampling_probability(cfg, e) for e in range(0, 40, 5)]
    assert got == pytest.approx([0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.25, 0.25])
    assert sampling_probability(cfg, 4) == 0.0 and sampling_probability(cfg, 9) == pytest.approx(0.05)
    late = ScheduledSamplingConfig(enabled=True, start=3, every=1, increase=0.1, max_prob=1.0)
    assert [sampling_probability(late, e) for e in range(6)] == pytest.approx([0, 0, 0, 0, 0.1, 0.2])
    assert sampling_probability(ScheduledSamplingConfig(enabled=False, increase=0.5), 30) == 0.0
    with pytest.raises(ConfigError, match="max_prob is a probability, found 1.5"):
        ScheduledSamplingConfig(max_prob=1.5)


@pytest.mark.parametrize("arch, cross", ARCHS)
def test_probability_zero_is_teacher_forcing(arch, cross):
    model = tiny_captioner(arch, cross)
    features, fmask, captions = batch()
    with torch.no_grad():
        forced, forced_extras = model(features, fmask, captions, captions != 0)
        logits, extras, read = scheduled_forward(model, features, fmask, captions, 0.0)
    assert torch.equal(read, captions[:, :-1])
    real = (captions != 0)[:, 1:]
    torch.testing.assert_close(logits[real], forced[real], rtol=1e-5, atol=1e-5)
    if cross == "vanilla":
        assert extras == [{}] and forced_extras == [{}]
        return
    a, b = extras[-1]["history_weight"], forced_extras[-1]["history_weight"]
    torch.testing.assert_close(a[real[:, None].expand_as(a)], b[real[:, None].expand_as(b)], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch, cross", ARCHS)
def test_probability_one_greedy_is_free_running_decoding(arch, cross):
    """Every input after <bos> is the model's own argmax: the tokens read are greedy decoding's,
    whatever the reference says (up to greedy's first <eos>)."""
    model = tiny_captioner(arch, cross)
    features, fmask, captions = batch()
    with torch.no_grad():
        _, _, read = scheduled_forward(model, features, fmask, captions, 1.0, mode="greedy")
        decoded = greedy(model, features, fmask, max_len=captions.shape[1])
    for b in range(3):
        n = min(int(decoded.lengths[b]), captions.shape[1] - 2)
        assert read[b, 1:n + 1].tolist() == decoded.tokens[b, :n].tolist()
    assert not torch.equal(read[:, 1:], captions[:, 1:-1])


@pytest.mark.parametrize("arch, cross", ARCHS[:2])
def test_sampled_inputs_are_the_models_own_and_gradients_do_not_flow_through_them(arch, cross):
    """At p = 1 (sample) the logits are those of teacher forcing on the tokens it drew; the draw
    follows the given generator; a backward pass works (the draws are detached)."""
    model = tiny_captioner(arch, cross)  # eval mode: no dropout, so teacher forcing can replay it
    features, fmask, captions = batch()
    runs = [scheduled_forward(model, features, fmask, captions, 1.0, generator=torch.Generator().manual_seed(7))
            for _ in range(2)]
    assert torch.equal(runs[0][2], runs[1][2])
    logits, _, read = runs[0]
    again, _ = model(features, fmask, torch.cat([read, captions[:, -1:]], 1), torch.ones_like(captions, dtype=torch.bool))
    torch.testing.assert_close(logits, again, rtol=1e-5, atol=1e-5)
    logits.logsumexp(-1).sum().backward()
    assert model.decoder.output.weight.grad is not None


def test_half_the_inputs_are_swapped_at_p_one_half():
    model = tiny_captioner("updown", "vanilla")
    features, fmask, captions = batch()
    long = captions[:1].repeat(200, 1)
    with torch.no_grad():
        _, _, read = scheduled_forward(model, features[:1].repeat(200, 1, 1), fmask[:1].repeat(200, 1), long, 0.5,
                                       mode="greedy", generator=torch.Generator().manual_seed(0))
    swapped = (read[:, 1:] != long[:, 1:-1]).float().mean()
    assert 0.35 < float(swapped) < 0.55  # some draws coincide with the reference word


def test_a_training_run_logs_the_probability_of_each_epoch(tmp_path):
    world = make_world(tmp_path / "shapes", num_train=24, num_val=6, num_test=6, seed=2, feature_dim=32, progress=False)
    overrides = tiny_run_overrides(world, tmp_path / "run", **{
        "model.encoder": "embed", "model.decoder": "updown", "model.decoder_layers": 1, "model.cross_attention": "caca",
        "model.rnn.word_dim": 16, "model.rnn.att_hidden": 16, "train.awc.enabled": "true", "train.epochs": 3,
        "train.schedule.name": "step", "train.schedule.lr": 1e-3, "train.scheduled_sampling.enabled": "true",
        "train.scheduled_sampling.every": 1, "train.scheduled_sampling.increase": 0.3,
        "train.scheduled_sampling.max_prob": 0.5})
    api.train(None, overrides, log=lambda m: None)
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert {r["epoch"]: r["sampling"] for r in train} == {0: 0.0, 1: pytest.approx(0.3), 2: pytest.approx(0.5)}
    assert all(len(r["beta"]) == 1 and len(r["beta"][0]) == 1 for r in train)  # one layer, one head
    assert all(r["awc"] >= 0 for r in train)
