"""Logit processors on hand-made inputs: forbidden tokens become -inf, the rest is untouched."""

import pytest
import torch

from catcap.decoding import (BadEndings, MinLength, NoRepeatNGram, SuppressEos, SuppressTokens,
                             build_processors)
from catcap.decoding.processors import apply_processors, force_token

EOS, V = 2, 10
INF = float("-inf")


def scores(rows: int) -> torch.Tensor:
    return torch.log_softmax(torch.arange(rows * V, dtype=torch.float32).view(rows, V) / 7.0, dim=1)


def forbidden(out: torch.Tensor) -> list[list[int]]:
    return [torch.nonzero(torch.isneginf(row))[:, 0].tolist() for row in out]


def assert_only(out, before, expected):
    assert forbidden(out) == expected
    allowed = ~torch.isneginf(out)
    assert torch.equal(out[allowed], before[allowed]), "allowed tokens keep their log-prob (no renormalisation)"


def test_min_length_forbids_eos_before_min_len_words():
    rule, x = MinLength(2, EOS), scores(2)
    history = torch.tensor([[5], [6]])
    assert_only(rule(x, history[:, :0], 0), x, [[EOS], [EOS]])
    assert_only(rule(x, history, 1), x, [[EOS], [EOS]])
    assert_only(rule(x, torch.tensor([[5, 6], [6, 7]]), 2), x, [[], []])


def test_trigram_blocking():
    rule, x = NoRepeatNGram(3), scores(4)
    history = torch.tensor([
        [5, 6, 7, 5, 6, 0, 0, 0],   # would repeat "5 6 7" ... (padded with a fresh prefix below)
        [5, 6, 7, 5, 6, 8, 5, 6],   # "5 6" seen before 7 and before 8
        [5, 6, 7, 8, 9, 3, 4, 1],   # prefix "4 1" never seen
        [4, 4, 4, 4, 4, 4, 4, 4],   # "4 4 4" repeated
    ])
    history[0] = torch.tensor([1, 1, 5, 6, 7, 3, 5, 6])
    assert_only(rule(x, history, 8), x, [[7], [7, 8], [], [4]])


def test_ngram_blocking_needs_a_full_ngram_and_handles_other_sizes():
    x = scores(1)
    assert_only(NoRepeatNGram(3)(x, torch.tensor([[5, 5]]), 2), x, [[]])
    assert_only(NoRepeatNGram(2)(x, torch.tensor([[3, 4, 3]]), 3), x, [[4]])
    assert_only(NoRepeatNGram(1)(x, torch.tensor([[3, 8, 3]]), 3), x, [[3, 8]])
    with pytest.raises(ValueError, match="n-gram size"):
        NoRepeatNGram(0)


def test_bad_endings_forbid_eos_after_listed_words():
    rule, x = BadEndings([5, 6], EOS), scores(3)
    history = torch.tensor([[3, 5], [5, 7], [4, 6]])
    assert_only(rule(x, history, 2), x, [[EOS], [], [EOS]])
    assert_only(rule(x, history[:, :0], 0), x, [[], [], []])


def test_suppress_tokens_and_eos():
    x, history = scores(2), torch.zeros(2, 3, dtype=torch.long)
    assert_only(SuppressTokens([3, 0, 1, 3])(x, history, 3), x, [[0, 1, 3], [0, 1, 3]])
    assert_only(SuppressEos(EOS)(x, history, 3), x, [[EOS], [EOS]])


def test_force_token_overrides_the_rules_on_chosen_rows():
    x = SuppressEos(EOS)(scores(2), torch.zeros(2, 0, dtype=torch.long), 0)
    forced = force_token(x, torch.tensor([True, False]), EOS, torch.tensor([-1.5, -2.0]))
    assert forbidden(forced)[0] == [t for t in range(V) if t != EOS] and forced[0, EOS] == -1.5
    assert torch.equal(forced[1], x[1])


def test_build_processors_from_plain_arguments():
    rules = build_processors(EOS, min_len=3, no_repeat_ngram=3, suppress_ids=[0, 1, 3],
                             bad_ending_ids=[5], suppress_eos=False)
    assert [type(r).__name__ for r in rules] == ["SuppressTokens", "MinLength", "NoRepeatNGram", "BadEndings"]
    assert build_processors(EOS) == ()
    x = scores(1)
    out = apply_processors(rules, x, torch.tensor([[5]]), 1)
    assert_only(out, x, [[0, 1, EOS, 3]])
    with pytest.raises(ValueError, match="suppress_eos"):
        build_processors(EOS, suppress_ids=[EOS])
    with pytest.raises(ValueError, match="no_repeat_ngram"):
        build_processors(EOS, no_repeat_ngram=-1)
