"""``Captioner.generate`` end to end: each decoding option changes the caption the way its
documentation says (catcap.inference.captioner, catcap.decoding).

Oracle: a scripted model (``scripted_models``) whose next-word probabilities are fixed tables,
so every expected caption is worked out by hand from the table next to it. Sampling options are
checked on 4,000 seeded samples against the distribution they should draw from (computed by
hand: p ** (1 / T) renormalised, the top-k or nucleus set renormalised), within 0.035, about
4.5 standard errors.
"""

import pytest
import torch

from catcap.inference.captioner import Captioner
from catcap.data.vocab import Vocab
from catcap.models.config import ModelConfig
from catcap.training.experiment import ExperimentConfig
from scripted_models import EOS, ScriptedModel, scripted_batch

WORDS = ["a", "dog", "cat", "red", "runs", "the", "big"]
VOCAB = Vocab(WORDS)
A, DOG, CAT, RED, RUNS = (VOCAB.id(w) for w in ("a", "dog", "cat", "red", "runs"))
SAMPLES = 4000


def captioner(table: dict) -> Captioner:
    """A Captioner over a scripted model with one image (features [[0.0]]) and ``table``."""
    model = ScriptedModel({0: table}, vocab=len(VOCAB))
    return Captioner(model, VOCAB, ExperimentConfig(model=ModelConfig(feature_dim=1)), torch.device("cpu"))


def generate(table: dict, **options):
    """Greedy unless ``options`` say otherwise: the expected captions are worked out for greedy
    decoding (``generate``'s own default is beam 3)."""
    return captioner(table).generate(*scripted_batch(0), **{"num_beams": 1, **options})


def share(captions: list[str], caption: str) -> float:
    return sum(c == caption for c in captions) / len(captions)


def test_min_length_forbids_an_early_end():
    table = {(): {DOG: 0.4, EOS: 0.6}, (DOG,): {EOS: 0.7, RUNS: 0.3}}
    assert generate(table) == [""]  # greedy: <eos> first (0.6)
    assert generate(table, min_length=1) == ["dog"]
    assert generate(table, min_length=2) == ["dog runs"]


def test_no_repeat_ngram_size_blocks_repeated_ngrams():
    repeats_a_word = {(): {DOG: 0.6, CAT: 0.4}, (DOG,): {DOG: 0.5, RUNS: 0.3, EOS: 0.2}}
    assert generate(repeats_a_word) == ["dog dog"]
    assert generate(repeats_a_word, no_repeat_ngram_size=1) == ["dog runs"]
    repeats_a_bigram = {(): {DOG: 1.0}, (DOG,): {RUNS: 1.0}, (DOG, RUNS): {DOG: 0.6, EOS: 0.4},
                        (DOG, RUNS, DOG): {RUNS: 0.7, CAT: 0.3}}
    assert generate(repeats_a_bigram) == ["dog runs dog runs"]
    assert generate(repeats_a_bigram, no_repeat_ngram_size=2) == ["dog runs dog cat"]  # "dog runs" again: blocked
    assert generate(repeats_a_bigram, no_repeat_ngram_size=3) == ["dog runs dog runs"]  # no trigram repeats


def test_remove_bad_endings_forbids_ending_on_a_function_word():
    table = {(): {A: 0.9, DOG: 0.1}, (A,): {EOS: 0.6, DOG: 0.4}}
    assert generate(table) == ["a"]
    assert generate(table, remove_bad_endings=True) == ["a dog"]
    ends_on_a_noun = {(): {DOG: 1.0}}
    assert generate(ends_on_a_noun, remove_bad_endings=True) == ["dog"]


# "dog <eos>" has p 0.5 * 0.6 = 0.3; "cat runs red <eos>" 0.45 * 0.8 * 0.9 * 0.9 = 0.2916
EARLY_LATE = {(): {DOG: 0.5, CAT: 0.45, EOS: 0.05}, (DOG,): {EOS: 0.6, RUNS: 0.4}, (CAT,): {RUNS: 0.8, EOS: 0.2},
              (CAT, RUNS): {RED: 0.9, EOS: 0.1}, (CAT, RUNS, RED): {EOS: 0.9, A: 0.1}}


@pytest.mark.parametrize("length_penalty, expected", [
    (0.0, "dog"),           # raw sums: ln 0.3 > ln 0.2916
    (1.0, "cat runs red"),  # per token: ln 0.2916 / 4 = -0.31 > ln 0.3 / 2 = -0.60
    (-1.0, "dog"),          # sum * length: 2 ln 0.3 = -2.41 > 4 ln 0.2916 = -4.93
])
def test_length_penalty_chooses_between_a_short_and_a_long_caption(length_penalty, expected):
    assert generate(EARLY_LATE, num_beams=2, length_penalty=length_penalty) == [expected]


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_temperature_sharpens_or_flattens_the_distribution(temperature):
    """p(dog) = 0.6, p(cat) = 0.4; sampled at temperature T: 0.6 ** (1/T) / (0.6 ** (1/T) + 0.4 ** (1/T))."""
    table = {(): {DOG: 0.6, CAT: 0.4}}
    (captions,) = generate(table, do_sample=True, temperature=temperature, num_return_sequences=SAMPLES, seed=0)
    expected = 0.6 ** (1 / temperature) / (0.6 ** (1 / temperature) + 0.4 ** (1 / temperature))
    assert {"dog", "cat"} == set(captions)
    assert share(captions, "dog") == pytest.approx(expected, abs=0.035)


THREE = {(): {DOG: 0.5, CAT: 0.3, RED: 0.2}}


@pytest.mark.parametrize("options, expected", [
    ({}, {"dog": 0.5, "cat": 0.3, "red": 0.2}),
    ({"top_k": 2}, {"dog": 0.5 / 0.8, "cat": 0.3 / 0.8}),  # the 2 best, renormalised
    ({"top_k": 1}, {"dog": 1.0}),
    ({"top_p": 0.6}, {"dog": 0.5 / 0.8, "cat": 0.3 / 0.8}),  # dog alone (0.5) < 0.6: dog + cat
    ({"top_p": 0.5}, {"dog": 1.0}),  # dog alone reaches 0.5
    ({"top_k": 2, "top_p": 0.5}, {"dog": 1.0}),
])
def test_top_k_and_top_p_sample_from_the_kept_words_only(options, expected):
    (captions,) = generate(THREE, do_sample=True, num_return_sequences=SAMPLES, seed=1, **options)
    assert set(captions) == set(expected)
    for caption, p in expected.items():
        assert share(captions, caption) == pytest.approx(p, abs=0.035), caption


def test_sampled_captions_follow_the_rules_too():
    """The decoding rules apply to sampling as well: with min_length=1 no sample is empty, and
    the model's own share of "dog" (0.4 of the non-empty mass 0.4 + 0.1) is kept."""
    table = {(): {DOG: 0.4, CAT: 0.1, EOS: 0.5}}
    (captions,) = generate(table, do_sample=True, num_return_sequences=SAMPLES, seed=2, min_length=1)
    assert set(captions) == {"dog", "cat"}
    assert share(captions, "dog") == pytest.approx(0.4 / (0.4 + 0.1), abs=0.035)


def test_return_dict_in_generate_gives_the_captions_with_their_scores():
    """Greedy on the table below takes "dog" (0.6) then <eos> (0.7): log 0.6 + log 0.7; beam 2
    keeps "cat runs" too (0.4 * 1.0 * 1.0 = 0.4 < 0.42) and returns it second."""
    import math

    table = {(): {DOG: 0.6, CAT: 0.4}, (DOG,): {EOS: 0.7, RUNS: 0.3}, (CAT,): {RUNS: 1.0}, (CAT, RUNS): {EOS: 1.0}}
    cap = captioner(table)
    out = cap.generate(*scripted_batch(0), num_beams=1, return_dict_in_generate=True, output_scores=True)
    assert out["captions"] == ["dog"]
    assert out["sequences"].tolist() == [[DOG, EOS]]
    assert out["log_probs"].tolist() == pytest.approx([math.log(0.6) + math.log(0.7)], abs=1e-6)
    assert out["sequences_scores"].tolist() == pytest.approx(out["log_probs"].tolist())
    assert out["token_log_probs"][0].tolist() == pytest.approx([math.log(0.6), math.log(0.7)], abs=1e-6)
    assert out["lengths"].tolist() == [2]
    both = cap.generate(*scripted_batch(0), num_beams=2, num_return_sequences=2, return_dict_in_generate=True)
    assert both["captions"] == [["dog", "cat runs"]] and "token_log_probs" not in both
    assert both["log_probs"].tolist() == pytest.approx([math.log(0.42), math.log(0.4)], abs=1e-6)
    assert cap.generate(*scripted_batch(0), num_beams=1) == ["dog"]  # without it: the captions alone
    with pytest.raises(ValueError, match="return_dict_in_generate=True"):
        cap.generate(*scripted_batch(0), output_scores=True)
