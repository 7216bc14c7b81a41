"""Diverse beam search (``num_beam_groups`` G, ``diversity_penalty``): a case worked out by hand on
a scripted model, the batched search against the written-out reference
(``catcap.decoding.reference_diverse``, which re-runs every prefix and never stops early) on the
real decoders, and the defining property: with a large penalty no group takes a token an earlier
group took at the same step. With G = 1 the search is plain beam search (the oracle tests of
test_beam.py run that path)."""

import math

import pytest
import torch

from catcap.decoding import GenerationConfig, beam_search, build_processors, generate
from catcap.decoding.reference import reference_beam_search
from catcap.decoding.reference_diverse import reference_diverse_beam_search
from scripted_models import ScriptedModel, scripted_batch
from test_beam import make_model, regions

PAD, BOS, EOS, A, B, C, D = range(7)
# Plain beam search with K = 2 keeps "a <eos>" (0.30) and "a d <eos>" (0.20): both start with "a".
# Diverse, 2 groups of 1 beam, penalty 10: group 0 takes "a"; group 1's "a" costs 10, so it takes
# "c" (0.3); step 1: group 0 pools "a <eos>" (0.30) and keeps "a d" open; group 1 pools "c <eos>"
# (0.18), its "c d" (0.12, and d is group 0's token: -10) stays open; both pools are full and
# no open beam can beat them: stop. Captions "a" (ln 0.3) and "c" (ln 0.18).
SAME_START = {(): {A: 0.5, C: 0.3, B: 0.2}, (A,): {EOS: 0.6, D: 0.4}, (C,): {EOS: 0.6, D: 0.4}}


def diverse(model, features, mask, beams, groups, penalty, max_len, alpha=0.0, rules=None, num_return=None):
    config = GenerationConfig(num_beams=beams, num_beam_groups=groups, diversity_penalty=penalty, max_length=max_len,
                              length_penalty=alpha, num_return_sequences=num_return or beams)
    with torch.no_grad():
        return generate(model, features, mask, config, processors=build_processors(EOS, **(rules or {})))


def test_a_large_penalty_sends_the_second_group_to_another_first_word():
    features, mask = scripted_batch(0)
    plain = beam_search(ScriptedModel({0: SAME_START}), features, mask, beam_size=2, max_len=4, num_return=2)
    assert plain.tokens.tolist() == [[A, EOS, PAD], [A, D, EOS]]
    model = ScriptedModel({0: SAME_START})
    out = diverse(model, features, mask, beams=2, groups=2, penalty=10.0, max_len=4)
    assert out.tokens.tolist() == [[A, EOS], [C, EOS]]
    torch.testing.assert_close(out.scores, torch.tensor([math.log(0.3), math.log(0.18)]))
    torch.testing.assert_close(out.log_probs, torch.tensor([math.log(0.3), math.log(0.18)]))
    assert model.steps == 2, "both pools are full after step 1 and no open beam can beat them"
    ref = reference_diverse_beam_search(ScriptedModel({0: SAME_START}), features, mask, 2, 2, 10.0, max_len=4,
                                        num_return=2)
    assert ref.tokens.tolist() == out.tokens.tolist()


def test_the_penalty_stays_in_the_score_of_a_penalised_beam():
    """A beam that took an earlier group's token keeps the penalty in its score (Hugging Face's
    bookkeeping); ``log_probs`` stays the model's log-probability of the caption. With alpha 0,
    score = log-prob - penalty x (tokens shared with earlier groups along the way)."""
    model, (features, mask) = make_model(0, 0.6), regions(10)
    out = diverse(model, features, mask, beams=4, groups=2, penalty=0.05, max_len=8)  # small: groups still meet
    gap = (out.log_probs - out.scores) / 0.05
    torch.testing.assert_close(gap, gap.round(), rtol=0, atol=1e-3)  # whole numbers of penalties
    assert bool((gap.round() >= 0).all()) and bool((gap.round() > 0).any())


def test_one_group_is_plain_beam_search_and_so_is_the_reference_of_one_group():
    model, (features, mask) = make_model(1, 0.6, "caca"), regions(11)
    plain = beam_search(model, features, mask, beam_size=4, max_len=8, length_penalty=1.0, num_return=4)
    config = GenerationConfig(num_beams=4, max_length=8, length_penalty=1.0, num_return_sequences=4)
    with torch.no_grad():
        again = generate(model, features, mask, config)
    assert torch.equal(plain.tokens, again.tokens) and torch.equal(plain.scores, again.scores)
    ref = reference_diverse_beam_search(model, features, mask, 4, 1, 0.0, max_len=8, length_penalty=1.0, num_return=4)
    assert ref.tokens.tolist() == reference_beam_search(model, features, mask, beam_size=4, max_len=8,
                                                        length_penalty=1.0, num_return=4).tokens.tolist()


@pytest.mark.parametrize("arch, cross, options", [("transformer", "vanilla", {}), ("transformer", "caca", {}),
                                                  ("m2", "caca", {}), ("updown", "caca", {})])
@pytest.mark.parametrize("beams, groups, penalty, alpha, rules", [
    (4, 2, 0.5, 0.0, {}),
    (4, 2, 2.0, 1.0, {"no_repeat_ngram": 2}),
    (3, 3, 0.3, 0.0, {"min_len": 2}),
    (6, 3, 1.0, 1.0, {}),
])
def test_batched_diverse_search_equals_the_reference(arch, cross, options, beams, groups, penalty, alpha, rules):
    model, (features, mask) = make_model(2, 0.6, cross, arch, **options), regions(12)
    out = diverse(model, features, mask, beams, groups, penalty, 8, alpha, rules)
    ref = reference_diverse_beam_search(model, features, mask, beams, groups, penalty, max_len=8, length_penalty=alpha,
                                        rules=rules, num_return=beams)
    assert out.tokens.tolist() == ref.tokens.tolist()
    torch.testing.assert_close(out.scores, ref.scores, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.token_log_probs, ref.token_log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(out.log_probs, out.token_log_probs.sum(1))
    ranked = out.scores.view(3, beams)
    assert bool((ranked[:, :-1] >= ranked[:, 1:]).all()), "an image's captions are ranked best first over all groups"


def _word_positions_shared(tokens, lengths, rows):
    """Whether two captions among ``rows`` have the same word at the same position."""
    words = [tokens[r, :int(lengths[r]) - 1].tolist() for r in rows]
    return any(a[t] == b[t] for i, a in enumerate(words) for b in words[i + 1:] for t in range(min(len(a), len(b))))


def test_with_a_large_penalty_no_group_takes_a_token_an_earlier_group_took_at_that_step():
    """One beam per group: each returned caption is one group's, its words are its beam's picks
    at each step, so no two captions share a word at the same position. Plain beam search on the
    same images does share some (the property is not vacuous)."""
    shared_plain = 0
    for seed in (0, 1, 2):
        model, (features, mask) = make_model(seed, 0.6), regions(seed + 20)
        out = diverse(model, features, mask, beams=3, groups=3, penalty=1e4, max_len=8)
        plain = beam_search(model, features, mask, beam_size=3, max_len=8, num_return=3)
        for image in range(3):
            rows = range(3 * image, 3 * image + 3)
            assert not _word_positions_shared(out.tokens, out.lengths, rows), out.tokens[3 * image:3 * image + 3]
            shared_plain += _word_positions_shared(plain.tokens, plain.lengths, rows)
    assert shared_plain > 0
