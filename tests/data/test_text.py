"""caption_tokens is the evaluation tokenizer, so training and evaluation see the same words."""

import pytest

from catcap.data.text import caption_text, caption_tokens
from catcap.metrics.tokenizer import ptb_tokenize

ODD = [
    "A dog's toy.",
    "Two men   ride bikes!",
    "The kid isn't (really) happy?",
    'She said "hello" -- then left...',
    "A man cannot find 5 1/2 €",
    "Line one\nline two",
    "MR. Smith at the U.S. border; it's 3:30",
    "",
    "   ",
    "emoji 🙂 in a caption",
]


@pytest.mark.parametrize("raw", ODD)
def test_caption_tokens_is_ptb_tokenize(raw):
    assert caption_tokens(raw) == ptb_tokenize(raw)


def test_caption_tokens_examples():
    assert caption_tokens("A dog's toy.") == ["a", "dog", "'s", "toy"]
    assert caption_tokens("The kid isn't (really) happy?") == ["the", "kid", "is", "n't", "-lrb-", "really", "-rrb-", "happy"]
    assert caption_tokens("") == []
    assert caption_text(["a", "dog"]) == "a dog"


def test_caption_tokens_rejects_non_strings():
    with pytest.raises(TypeError, match="caption string"):
        caption_tokens(["a", "dog"])
