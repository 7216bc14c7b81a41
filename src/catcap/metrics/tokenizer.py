"""Pure-Python re-implementation of the caption tokenizer of ``pycocoevalcap``.

``pycocoevalcap`` (``tokenizer/ptbtokenizer.py``) writes the captions one per
line (``'\\n'`` inside a caption replaced by ``' '``), runs Stanford CoreNLP
3.4.1's ``edu.stanford.nlp.process.PTBTokenizer -preserveLines -lowerCase`` on
the file, splits every output line on ``' '`` and drops the 17 tokens of its
``PUNCTUATIONS`` list.  :func:`ptb_tokenize` gives the same tokens without
Java: the jar's JFlex grammar is re-expressed in :mod:`._ptb_rules` and a fast
path handles the plain captions (ASCII letters/digits/spaces and an optional
final period) that make up most of COCO.  It is checked token for token
against the jar on all 616,767 COCO 2014 training/validation captions and on
random strings (``benchmarks/tokenizer_parity.py``).

Behaviours worth knowing (all copied from the jar):

* contractions and possessives split (``isn't`` -> ``is n't``, ``dog's`` ->
  ``dog 's``, ``cannot`` -> ``can not``, ``gonna`` -> ``gon na``);
* brackets become ``-lrb-``/``-rrb-``/``-lsb-``/``-rsb-``/``-lcb-``/``-rcb-``
  and are *kept*: the toolkit's list holds the upper-case forms only, and the
  jar lower-cases before the list is applied;
* quotes (ASCII, curly, guillemets) become the PTB quote tokens (two
  backquotes, two apostrophes, one backquote, one apostrophe) and are dropped
  -- except the low-9 and reversed ones (``„ ‚ ‟``), which the jar leaves as
  they are and which therefore survive as tokens;
* hyphenated words, ``&``, ``%``, ``#``, ``/``, ``!!!``, ``?!``, ``-----``
  survive; ``½`` -> ``1/2``, ``5 1/2`` -> one token with a no-break space,
  ``€`` -> ``$``, ``£`` -> ``#``, ``¢`` -> ``cents``;
* abbreviations keep their period (``mr.``, ``st.``, ``u.s.``, ``a.``);
* characters the jar does not know (emoji, anything above U+FFFF, most control
  characters, private-use characters...) are deleted, which can split a word.

Line breaks inside a caption: besides ``'\\n'`` (turned into a space by the
toolkit itself), the jar treats ``'\\r'``, U+000B, U+000C, U+2028 and U+2029 as
line breaks (U+0085 it reads as an ellipsis).  In ``pycocoevalcap`` such a
caption produces several output lines, so every later caption of the batch is
silently attached to the wrong image (a bug of the toolkit; the result then
also depends on the other captions of the batch).  Here every caption is
tokenized on its own: the result is what the jar prints for the caption alone
in its input, all of its output lines joined.  The same "alone" rule settles
the rare cases where the jar looks past the end of a caption into the next one
(a caption ending in ``I.`` gives ``i.`` alone but ``i`` when the next caption
starts with ``It``).  Empty and whitespace-only captions give no tokens (the
jar prints an empty line).
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, Hashable, List, Mapping, Optional, Sequence, TypeVar

from ._ptb_patterns import ABBREV_WORDS, NEWLINE_TOKEN
from ._ptb_rules import SPLIT_WORDS, lex

__all__ = ["PUNCTUATIONS", "ptb_tokenize", "tokenize_captions"]

K = TypeVar("K", bound=Hashable)

#: The tokens ``pycocoevalcap`` removes after tokenization (its ``PUNCTUATIONS``).
PUNCTUATIONS: FrozenSet[str] = frozenset([
    "''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
    ".", "?", "!", ",", ":", "-", "--", "...", ";",
])

# Fast path: ASCII letters/digits separated by spaces, with an optional final
# period.  Such words are single tokens except in the cases tested below.
# Group 1: a digit occurs; group 2: the final period.
_PLAIN = re.compile(r"[A-Za-z ]*(?:([0-9])[A-Za-z0-9 ]*)?(\.?) *")
# Two numbers separated by spaces may form one token (phone numbers: "555 1234 567").
_NUMBER_SPACE_NUMBER = re.compile(r"[0-9] +[0-9]")


def _plain_tokens(text: str) -> Optional[List[str]]:
    """Tokens of a plain caption, or ``None`` if the general lexer is needed."""
    m = _PLAIN.fullmatch(text)
    if m is None or (m.group(1) is not None and _NUMBER_SPACE_NUMBER.search(text) is not None):
        return None
    low = text.lower()
    period = m.start(2) < m.end(2)
    if period:
        low = low[: m.start(2)]
    tokens = low.split()
    # "cannot", "gonna", "gotta", "lemme", "gimme", "wanna" are split by the jar
    if ("nn" in low or "tt" in low or "mm" in low) and not SPLIT_WORDS.isdisjoint(tokens):
        return None
    # "Co." / "Mr." / "U." keep their period (or depend on what follows)
    if period and tokens and low[-1] != " " and tokens[-1] in ABBREV_WORDS:
        return None
    return tokens


# Letters Python (Unicode 14) lower-cases but the jar's Java 17 (Unicode 13) does not.
_JAVA_KEEPS_CASE = re.compile(
    "([\u2c2f\ua7c0\ua7d0\ua7d6\ua7d8\U00010570-\U0001057a\U0001057c-\U0001058a"
    "\U0001058c-\U00010592\U00010594\U00010595])"
)


def java_lower(tok: str) -> str:
    """``String.toLowerCase(Locale.ENGLISH)`` as the jar's Java 17 does it."""
    if tok.isascii() or _JAVA_KEEPS_CASE.search(tok) is None:
        return tok.lower()
    parts = _JAVA_KEEPS_CASE.split(tok)
    return "".join(p if i % 2 else p.lower() for i, p in enumerate(parts))


def _lexed_tokens(text: str) -> List[str]:
    """Tokens of any caption through the full lexer."""
    tokens = []
    for tok in lex(text):
        if tok == NEWLINE_TOKEN:
            continue
        tok = java_lower(tok)
        if tok not in PUNCTUATIONS:
            tokens.append(tok)
    return tokens


def ptb_tokenize(text: str) -> List[str]:
    """Lower-cased PTB tokens of one caption, without the toolkit's punctuation.

    ``" ".join(ptb_tokenize(c))`` is the string ``pycocoevalcap``'s
    ``PTBTokenizer`` produces for caption ``c`` (see the module docstring for
    captions containing line breaks).
    """
    if "\n" in text:
        text = text.replace("\n", " ")
    tokens = _plain_tokens(text)
    if tokens is None:
        tokens = _lexed_tokens(text)
    return tokens


def tokenize_captions(captions: Mapping[K, Sequence[str]]) -> Dict[K, List[str]]:
    """Tokenize ``{key: [caption, ...]}`` like ``PTBTokenizer().tokenize``.

    Takes plain caption strings (not ``{'caption': ...}`` dicts) and returns,
    for every key in order, the space-joined tokens of each of its captions.
    As in the toolkit, a key without any caption is left out of the result.
    """
    return {key: [" ".join(ptb_tokenize(c)) for c in caps]
            for key, caps in captions.items() if len(caps)}
