"""caption_tokens is the evaluation tokenizer, so training and evaluation see the same words.

Oracle: every expected token list below is what pycocoevalcap's Stanford CoreNLP 3.4.1 jar
printed for the caption tokenized alone (``PTBTokenizer -preserveLines -lowerCase``, then the
toolkit's punctuation removal; the same procedure as ``tests/metrics/test_tokenizer.py``'s
live check), recorded once so that no Java is needed here.
"""

import pytest

from catcap.data.text import caption_text, caption_tokens

# (raw caption, the jar's tokens after punctuation removal)
JAR_OUTPUT = [
    ("A dog's toy.", ["a", "dog", "'s", "toy"]),
    ("Two men   ride bikes!", ["two", "men", "ride", "bikes"]),
    ("The kid isn't (really) happy?", ["the", "kid", "is", "n't", "-lrb-", "really", "-rrb-", "happy"]),
    ('She said "hello" -- then left...', ["she", "said", "hello", "then", "left"]),
    ("A man cannot find 5 1/2 €", ["a", "man", "can", "not", "find", "5\u00a01/2", "$"]),
    ("Line one\nline two", ["line", "one", "line", "two"]),
    ("MR. Smith at the U.S. border; it's 3:30", ["mr.", "smith", "at", "the", "u.s.", "border", "it", "'s", "3:30"]),
    ("", []),
    ("   ", []),
    ("emoji 🙂 in a caption", ["emoji", "in", "a", "caption"]),
]


@pytest.mark.parametrize("raw, expected", JAR_OUTPUT, ids=[repr(raw)[:24] for raw, _ in JAR_OUTPUT])
def test_caption_tokens_are_the_toolkit_jars_tokens(raw, expected):
    assert caption_tokens(raw) == expected


def test_caption_text_joins_tokens_with_single_spaces():
    assert caption_text(["a", "dog"]) == "a dog"
    assert caption_text([]) == ""


def test_caption_tokens_rejects_non_strings():
    with pytest.raises(TypeError, match="caption string"):
        caption_tokens(["a", "dog"])
