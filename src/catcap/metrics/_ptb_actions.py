"""Token normalisations of the PTB lexer (the actions of its rules).

An action maps ``(match, start)`` to ``(token or None, position where lexing resumes)``.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Tuple

from ._ptb_patterns import (
    NEWLINE_TOKEN,
)

# ---------------------------------------------------------------------------
# Token normalisations (the lexer's actions)
# ---------------------------------------------------------------------------
_SOFT_HYPHEN = "\u00ad"
_LEFT_SINGLE = re.compile("[\u0091\u2018\u201b\u2039]")
_RIGHT_SINGLE = re.compile("[\u0092\u2019\u203a]")
_LEFT_DOUBLE = re.compile("[\u0093\u201c\u00ab]")
_RIGHT_DOUBLE = re.compile("[\u0094\u201d\u00bb]")
_ASCII_SINGLE = re.compile("&apos;|'")
_ASCII_DOUBLE = re.compile('"|&quot;')
_AMP = re.compile("(?i:&amp;)")
_FRACTIONS = {"\u00bc": "1/4", "\u00bd": "1/2", "\u00be": "3/4", "\u2153": "1/3", "\u2154": "2/3"}
_CURRENCY = {"\u00a2": "cents", "\u00a3": "#", "\u0080": "$", "\u00a4": "$", "\u20a0": "$",
             "\u20ac": "$"}


def remove_soft_hyphens(tok: str) -> str:
    """Drop U+00AD (a token made only of soft hyphens becomes ``-``)."""
    if _SOFT_HYPHEN not in tok:
        return tok
    return tok.replace(_SOFT_HYPHEN, "") or "-"


def latex_quotes(tok: str, probably_left: bool) -> str:
    """Map quote characters to the PTB/LaTeX ones: opening ` and ``, closing ' and ''."""
    if probably_left:
        tok = _ASCII_SINGLE.sub("`", tok)
        tok = _ASCII_DOUBLE.sub("``", tok)
    else:
        tok = _ASCII_SINGLE.sub("'", tok)
        tok = _ASCII_DOUBLE.sub("''", tok)
    tok = _LEFT_SINGLE.sub("`", tok)
    tok = _RIGHT_SINGLE.sub("'", tok)
    tok = _LEFT_DOUBLE.sub("``", tok)
    return _RIGHT_DOUBLE.sub("''", tok)


def normalize_amp(tok: str) -> str:
    """Replace the entity ``&amp;`` (any case) with ``&``."""
    return _AMP.sub("&", tok) if "&" in tok else tok


def _parens(tok: str) -> str:
    """Round brackets inside a token (phones, smileys) as ``-LRB-``/``-RRB-``."""
    return tok.replace("(", "-LRB-").replace(")", "-RRB-")


# Actions: ``action(match, start) -> (token or None, position where lexing resumes)``.
Action = Callable[[re.Match, int], Tuple[Optional[str], int]]


def _keep(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """The match is the token."""
    return m.group(0), m.end()


def _keep_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Group 1 is the token; its trailing context is lexed again."""
    return m.group(1), m.end(1)


def _drop(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Nothing (spaces, deleted characters)."""
    return None, m.end()


def _const(value: str) -> Action:
    """Action giving the fixed token ``value``."""

    def act(m: re.Match, start: int) -> Tuple[Optional[str], int]:
        return value, m.end()
    return act


def _pushback(n: int) -> Action:
    """Action keeping all but the last ``n`` characters (lexed again)."""

    def act(m: re.Match, start: int) -> Tuple[Optional[str], int]:
        end = m.end() - n
        return m.string[start:end], end
    return act


def _soft(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """The match without soft hyphens."""
    return remove_soft_hyphens(m.group(0)), m.end()


def _soft_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Group 1 without soft hyphens."""
    return remove_soft_hyphens(m.group(1)), m.end(1)


def _quote_right(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """The match with quotes normalised as closing ones."""
    return latex_quotes(m.group(0), False), m.end()


def _quote_right_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Group 1 with quotes normalised as closing ones."""
    return latex_quotes(m.group(1), False), m.end(1)


def _quote_left_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Group 1 with quotes normalised as opening ones."""
    return latex_quotes(m.group(1), True), m.end(1)


def _amp(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """The match with ``&amp;`` decoded."""
    return normalize_amp(m.group(0)), m.end()


def _amp_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Group 1 with ``&amp;`` decoded."""
    return normalize_amp(m.group(1)), m.end(1)


def _nbsp(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """The match with its spaces turned into no-break spaces."""
    return m.group(0).replace(" ", "\u00a0"), m.end()


def _phone(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A phone number: no-break spaces, bracket tokens."""
    return _parens(m.group(0).replace(" ", "\u00a0")), m.end()


def _smiley_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A smiley (group 1) with bracket tokens."""
    return _parens(m.group(1)), m.end(1)


def _smiley(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A smiley with bracket tokens."""
    return _parens(m.group(0)), m.end()


def _fraction(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A fraction character, spelled out for the five common ones."""
    tok = m.group(0)
    return _FRACTIONS.get(tok, tok), m.end()


def _currency(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A currency sign, some mapped to PTB forms (cents, #, $)."""
    tok = m.group(0)
    return _CURRENCY.get(tok, tok), m.end()


def _hyphens(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Three or four hyphens make a dash ``--``; other runs stay."""
    tok = m.group(0)
    return ("--" if 3 <= len(tok) <= 4 else tok), m.end()


def _period_dup_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Abbreviation before a sentence end: keep ``Co.`` and lex its period again."""
    end = m.end(1)
    return m.group(1), end - 1


def _period_dup(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """Abbreviation at the very end: keep ``Co.`` and lex its period again."""
    end = m.end()
    return m.group(0), end - 1


def _acronym_g1(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """ACRONYM before a sentence-initial word: ``U.S.`` + ``.``; ``I.`` -> ``I`` + ``.``."""
    tok = m.group(1)
    end = m.end(1)
    if len(tok) == 2:
        return tok[0], end - 1
    return tok, end - 1


def _newline(m: re.Match, start: int) -> Tuple[Optional[str], int]:
    """A line break."""
    return NEWLINE_TOKEN, m.end()
