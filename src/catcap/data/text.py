"""Caption normalisation shared by training and evaluation.

Every caption that reaches a vocabulary, a training target or a reference list goes through
:func:`caption_tokens`, which is exactly the tokenizer the evaluation uses
(:func:`catcap.metrics.tokenizer.ptb_tokenize`, the pure-Python port of pycocoevalcap's
Stanford PTB tokenizer): lower-cased PTB tokens with the toolkit's 17 punctuation tokens
removed. A model is therefore trained on the very words it is scored on: ``"A dog's toy."``
becomes ``["a", "dog", "'s", "toy"]`` both in the vocabulary and in BLEU/CIDEr, and
self-critical rewards compare like with like.

Karpathy split files carry their own ``tokens`` field (a simpler tokenisation that, e.g.,
drops the ``'s`` of possessives); catcap uses it only for sentences that have no ``raw``
text (see :mod:`catcap.data.karpathy`).
"""

from __future__ import annotations

from catcap.metrics.tokenizer import ptb_tokenize

__all__ = ["caption_tokens", "caption_text"]


def caption_tokens(raw: str) -> list[str]:
    """Tokens of one raw caption, as the evaluation sees them.

    ``caption_tokens(c) == ptb_tokenize(c)``: lower-case PTB tokens, punctuation of the
    COCO toolkit removed; an empty or whitespace-only caption gives ``[]``.
    """
    if not isinstance(raw, str):
        raise TypeError(f"caption_tokens expects a caption string, found {type(raw).__name__}: {raw!r}")
    return ptb_tokenize(raw)


def caption_text(tokens: list[str]) -> str:
    """A token list back to the space-joined caption string used in result files."""
    return " ".join(tokens)
