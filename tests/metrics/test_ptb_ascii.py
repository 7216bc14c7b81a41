"""The lexer's ASCII-cut rules match exactly as the full rules on ASCII text."""

import random
import re

import pytest

import catcap.metrics._ptb_rules as rules
from catcap.metrics._ptb_ascii import ascii_pattern

PIECES = ["can't", "cannot", "U.S.", "p.m.", "S.D.", "Mr.", "e-mail", "www.x.com", "a@b.com", ":-)", "1/2",
          "3.5", "''", "``", "--", "...", "(", ")", "&amp;", "n't", "'s", "ol'", "y'all", "gonna", "St.",
          "#tag", "@me", "http://a.b/c", "555-1234", "5 1/2", "$", "%"]


@pytest.mark.parametrize("pattern, expected", [
    ("[A-Za-z\\u00e9\\u0100-\\u0200]", "[A-Za-z\u0130\u0131\u017f]"),  # non-ASCII dropped, the folds of i, i, s kept
    ("[^\\u00e9]x", "[\\x00-\\U0010ffff]x"),                          # negated: every ASCII character
    ("[\\u00e9]+", "[^\\x00-\\x7f]+"),                                 # positive: no ASCII character
    ("[\\u0020-\\u00ff\\d]", "[\\u0020-\\x7f\\d]"),                   # a range is clipped at 0x7f
    ("\\[a\\]", "\\[a\\]"),                                           # escaped brackets are no class
    ("[]a-]", "[]a-]"),
])
def test_ascii_pattern_by_hand(pattern, expected):
    assert ascii_pattern(pattern) == expected


def _random_ascii(rng: random.Random) -> str:
    alphabet = [chr(c) for c in range(32, 127)] + ["\t", "\n"]
    return "".join(rng.choice(PIECES + alphabet + [" "] * 10) for _ in range(rng.randint(1, 6)))


def test_every_rule_matches_the_same_on_ascii_text():
    rng = random.Random(0)
    texts = [_random_ascii(rng) for _ in range(1500)] + PIECES
    for _, pattern, _ in rules._RULES:
        full, cut = re.compile(pattern), re.compile(ascii_pattern(pattern))
        for text in texts:
            for pos in (0, 1):
                a, b = full.match(text, pos), cut.match(text, pos)
                assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups())), (pattern[:60], text)


def test_lexing_ascii_text_through_either_rule_set_agrees():
    rng = random.Random(1)
    for text in [_random_ascii(rng) for _ in range(300)]:
        full, pos = [], 0
        while pos < len(text):
            pos = rules._longest_match(text, pos, full.append, False)
        cut, pos = [], 0
        while pos < len(text):
            pos = rules._longest_match(text, pos, cut.append, True)
        assert cut == full, text
