"""Ensembles: one search over the members' combined log-probabilities, each member keeping its
own decoder state. Oracles: the best captions of two scripted models found by enumerating every
caption (brute force); the uncached reference beam search run on the members' teacher-forced
forwards combined at every position (no decoder state at all); and an ensemble of one model
against that model."""

import math

import pytest
import torch
from torch import nn

from catcap.data.vocab import Vocab
from catcap.decoding import GenerationConfig, generate
from catcap.decoding.ensemble import EnsembleModel
from catcap.decoding.reference import reference_beam_search
from catcap.inference.captioner import Captioner
from catcap.inference.ensemble import Ensemble
from catcap.models.config import ModelConfig
from catcap.training.experiment import ExperimentConfig
from scripted_models import ScriptedModel, scripted_batch
from test_beam import make_model, regions

PAD, BOS, EOS, A, B, C, D = range(7)
P = {(): {A: 0.5, B: 0.3, C: 0.2}, (A,): {EOS: 0.5, B: 0.5}, (B,): {EOS: 0.2, A: 0.8}, (C,): {EOS: 0.9, D: 0.1},
     (B, A): {EOS: 0.6, D: 0.4}}
Q = {(): {A: 0.2, B: 0.5, C: 0.3}, (A,): {EOS: 0.3, B: 0.6, C: 0.1}, (B,): {EOS: 0.6, A: 0.4}, (C,): {EOS: 0.5, D: 0.5},
     (B, A): {EOS: 0.9, D: 0.1}}  # no two captions of the ensemble tie, under either rule


def combined(tables, prefix, combine) -> dict[int, float]:
    """The ensemble's next-token distribution after ``prefix``, written out from the tables."""
    rows = [table.get(prefix, {EOS: 1.0}) for table in tables]
    if combine == "mean_prob":
        return {v: sum(r.get(v, 0.0) for r in rows) / len(rows) for v in set().union(*rows)}
    geometric = {v: math.prod(r[v] for r in rows) ** (1 / len(rows)) for v in set.intersection(*map(set, rows))}
    total = sum(geometric.values())
    return {v: p / total for v, p in geometric.items()}


def every_caption(tables, combine, max_len):
    """(tokens ending with <eos>, log-prob) of every caption the ensemble can say (<eos> forced
    after max_len words, with its probability)."""
    out, todo = [], [((), 0.0)]
    while todo:
        prefix, lp = todo.pop()
        for v, p in combined(tables, prefix, combine).items():
            if v == EOS:
                out.append((prefix + (EOS,), lp + math.log(p)))
            elif len(prefix) < max_len and p > 0:
                todo.append((prefix + (v,), lp + math.log(p)))
    return sorted(out, key=lambda c: -c[1])


@pytest.mark.parametrize("combine", ["mean_log_prob", "mean_prob"])
def test_two_scripted_models_give_the_brute_force_best_captions(combine):
    """Beam 4 keeps every prefix these tables allow, so it must return the 4 best captions of
    all; greedy takes the combined distribution's best word at every step."""
    ensemble = EnsembleModel([ScriptedModel({0: P}), ScriptedModel({0: Q})], combine)
    features, mask = scripted_batch(0)
    truth = every_caption([P, Q], combine, max_len=4)
    with torch.no_grad():
        out = generate(ensemble, features, mask, GenerationConfig(num_beams=4, max_length=4, num_return_sequences=4))
    got = [tuple(t[:n].tolist()) for t, n in zip(out.tokens, out.lengths)]
    assert got == [c for c, _ in truth[:4]]
    torch.testing.assert_close(out.log_probs, torch.tensor([lp for _, lp in truth[:4]]), rtol=0, atol=1e-5)
    prefix = ()
    while not prefix or prefix[-1] != EOS:
        dist = combined([P, Q], prefix, combine)
        prefix += (max(dist, key=dist.get),)
    with torch.no_grad():
        best = generate(ensemble, features, mask, GenerationConfig(num_beams=1, max_length=4))
    assert tuple(best.tokens[0, :int(best.lengths[0])].tolist()) == prefix


def test_the_combination_rules_differ():
    """The geometric mean drops a word one member never says, the mixture keeps it; here they
    even rank the two best captions the other way round."""
    assert C not in combined([P, Q], (A,), "mean_log_prob") and C in combined([P, Q], (A,), "mean_prob")
    assert every_caption([P, Q], "mean_log_prob", 4)[0][0] == (B, A, EOS)
    assert every_caption([P, Q], "mean_prob", 4)[0][0] == (A, B, EOS)


class UncachedEnsemble(nn.Module):
    """The members' teacher-forced forwards combined at every position: what the reference
    beam search reads (no decoder state). Member m reads feature columns ``slices[m]``."""

    def __init__(self, models, slices, combine):
        super().__init__()
        self.models, self.slices, self.combine = models, slices, combine
        self.bos_id, self.eos_id, self.pad_id = models[0].bos_id, models[0].eos_id, models[0].pad_id

    def forward(self, features, feature_mask, captions, caption_mask):
        lps = torch.stack([m(features[..., s], feature_mask, captions, caption_mask)[0].float().log_softmax(-1)
                           for m, s in zip(self.models, self.slices)])
        if self.combine == "mean_log_prob":
            return lps.mean(0), []
        return torch.logsumexp(lps, 0) - math.log(len(self.models)), []


@pytest.mark.parametrize("combine", ["mean_log_prob", "mean_prob"])
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_a_mixed_family_ensemble_with_its_own_features_per_member_equals_the_reference(combine, alpha):
    """M2 + CAT + Up-Down, each reading its own features: one beam search, each member's state
    (M2's levels, CACA's history, the LSTM's h/c) reordered with the beams."""
    members = [make_model(0, 0.6, "vanilla", "m2"), make_model(1, 0.6, "caca"), make_model(2, 0.6, "caca", "updown")]
    features, mask = regions(5)
    own = [features, features.roll(1, dims=2), features * 0.5]  # three different feature sets, one mask
    config = GenerationConfig(num_beams=3, max_length=8, length_penalty=alpha, num_return_sequences=3)
    with torch.no_grad():
        out = generate(EnsembleModel(members, combine), own, [mask] * 3, config)
    width = features.shape[-1]
    wide = torch.cat(own, dim=-1)
    slices = [slice(i * width, (i + 1) * width) for i in range(3)]
    ref = reference_beam_search(UncachedEnsemble(members, slices, combine), wide, mask, beam_size=3, max_len=8,
                                length_penalty=alpha, num_return=3)
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores, ref.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.token_log_probs, ref.token_log_probs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("settings", [{"num_beams": 1}, {"num_beams": 4, "num_return_sequences": 2},
                                      {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5}])
def test_an_ensemble_of_one_is_that_model(settings):
    model, (features, mask) = make_model(3, 0.6, "caca"), regions(6)
    config = GenerationConfig(max_length=9, **settings)
    with torch.no_grad():
        alone = generate(model, features, mask, config)
        one = generate(EnsembleModel([model]), features, mask, config)
    assert torch.equal(alone.tokens, one.tokens)
    torch.testing.assert_close(alone.scores, one.scores, rtol=0, atol=1e-5)


def shifted(table: dict) -> dict:
    """A table with the word ids moved up by one: a Vocab's ids 0-3 are <pad> <bos> <eos> <unk>."""
    up = lambda t: t + 1 if t > EOS else t  # noqa: E731
    return {tuple(map(up, prefix)): {up(t): p for t, p in row.items()} for prefix, row in table.items()}


def scripted_captioner(table, words=("a", "dog", "cat", "red")):
    vocab = Vocab(list(words))
    return Captioner(ScriptedModel({0: shifted(table)}, vocab=len(vocab)), vocab,
                     ExperimentConfig(model=ModelConfig(feature_dim=1)), torch.device("cpu"))


def test_the_public_ensemble_captions_and_refuses_what_it_cannot_do():
    p, q = scripted_captioner(P), scripted_captioner(Q)
    ens = Ensemble([p, q])
    features, mask = scripted_batch(0)
    best = every_caption([P, Q], "mean_log_prob", max_len=4)[0][0]  # (B, A, <eos>): "dog a"
    assert ens.generate(features, mask, max_length=4, num_beams=4) == ["dog a"] == \
        [" ".join(p.vocab.decode([t + 1 if t > EOS else t for t in best]))]
    assert Ensemble([p]).generate(features, mask, max_length=4) == p.generate(features, mask, max_length=4)
    assert ens.generate(member_features=[(features, mask), features], max_length=4, num_beams=4) == ["dog a"]
    with pytest.raises(ValueError, match="member 1 has another vocabulary than member 0"):
        Ensemble([p, scripted_captioner(Q, words=("a", "dog", "cat", "blue"))])
    with pytest.raises(ValueError, match="an ensemble has no attention of its own"):
        ens.generate(features, mask, output_attentions=True)
    with pytest.raises(ValueError, match="member_features needs one entry per member"):
        ens.generate(member_features=[features])
