"""The lexer's rules cut down to ASCII text, where they give exactly the same matches.

The letter, digit and symbol classes of the PTB lexer (``_ptb_charsets``) list thousands of
code points; compiling the rules that use them takes ~80 ms, more than scoring 1,000 captions.
A regex match that starts at ``pos`` reads only ``text[pos:]``, and on ASCII text a character
class ``[X]`` matches exactly the ASCII members of ``X`` (``[^X]``: the ASCII non-members). So
:func:`ascii_pattern` drops every non-ASCII member from each class (keeping the four that
match ASCII letters under IGNORECASE: U+017F, U+0130, U+0131, U+212A), and the scanner uses these
small patterns wherever the rest of the text is ASCII (almost every caption).
"""

from __future__ import annotations

from functools import lru_cache

#: Non-ASCII characters that equal an ASCII letter under re.IGNORECASE (s, i, i, k).
_FOLDS_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")
_NOTHING = "[^\\x00-\\x7f]"  # a class that no ASCII character matches
_EVERYTHING = "[\\x00-\\U0010ffff]"


def ascii_pattern(pattern: str) -> str:
    """``pattern`` with its character classes restricted to ASCII (see the module docstring)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif c == "[":
            body_end = _class_end(pattern, i)
            out.append(_ascii_class(pattern[i + 1:body_end]))
            i = body_end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``pattern[start] == "["``."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # a leading ] is a member
        i += 1
    while pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


@lru_cache(maxsize=None)  # the big classes (letters, digits) recur in many rules
def _ascii_class(body: str) -> str:
    """``[body]`` restricted to its ASCII members (and the IGNORECASE folds)."""
    negated = body.startswith("^")
    items = _class_items(body[1:] if negated else body)
    kept = []
    for text, first, low, high in items:
        if low is None or high < 0x80:
            kept.append(text)  # a class escape (\d, \w, \s) or an ASCII member: as written
            continue
        if low < 0x80:
            kept.append(f"{first}-\\x7f")
        kept.extend(ch for ch in _FOLDS_TO_ASCII if low <= ord(ch) <= high)
    if not kept:
        return _EVERYTHING if negated else _NOTHING
    return "[" + ("^" if negated else "") + "".join(kept) + "]"


def _class_items(body: str) -> list[tuple[str, str, int | None, int | None]]:
    """The members of a class body: (text as written, its first character's text, first code
    point, last code point); the code points are None for a class escape such as ``\\d``."""
    items, i = [], 0
    while i < len(body):
        text, low, i = _one_char(body, i)
        if low is not None and i + 1 < len(body) and body[i] == "-":
            end_text, high, j = _one_char(body, i + 1)
            items.append((text + "-" + end_text, text, low, high))
            i = j
        else:
            items.append((text, text, low, low))
    return items


def _one_char(body: str, i: int) -> tuple[str, int | None, int]:
    """One member at ``body[i]``: (text, code point or None for a class escape, next index)."""
    if body[i] != "\\":
        return body[i], ord(body[i]), i + 1
    kind = body[i + 1]
    if kind == "u":
        return body[i:i + 6], int(body[i + 2:i + 6], 16), i + 6
    if kind == "x":
        return body[i:i + 4], int(body[i + 2:i + 4], 16), i + 4
    if kind in "dDwWsS":
        return body[i:i + 2], None, i + 2
    simple = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "a": 7}
    return body[i:i + 2], simple.get(kind, ord(kind)), i + 2
