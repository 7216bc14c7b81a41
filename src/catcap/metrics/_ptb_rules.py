"""Rules of the Penn Treebank lexer of Stanford CoreNLP 3.4.1, re-expressed as Python regexes.

The jar's ``PTBLexer`` is a JFlex scanner: at each position it takes the
*longest* match over all of its rules (trailing context ``r1/r2`` included in
the length) and, on a tie, the rule written first.  :func:`lex` emulates that
with one compiled regex per rule (or per alternative of a rule, where Python's
first-alternative-wins semantics could otherwise return a shorter match),
grouped by the first character they can start with.

Every rule pattern captures the token part in group 1 when it has a trailing
context; the action then decides the token text and where lexing resumes
(JFlex ``yypushback``).  Only the options ``pycocoevalcap`` uses matter here:
``-preserveLines`` (newlines are tokens) and the 3.4.1 defaults (PTB3 escaping:
``-LRB-``, LaTeX quotes, ``--`` dashes, ``...`` ellipses, fractions and a few
currency signs normalised, no americanisation, no ``\\/`` escaping, unknown
characters deleted).
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional, Tuple

from ._ptb_ascii import ascii_pattern
from ._ptb_actions import (
    Action,
    _acronym_g1,
    _amp,
    _amp_g1,
    _const,
    _currency,
    _drop,
    _fraction,
    _hyphens,
    _keep,
    _keep_g1,
    _nbsp,
    _newline,
    _period_dup,
    _period_dup_g1,
    _phone,
    _pushback,
    _quote_left_g1,
    _quote_right,
    _quote_right_g1,
    _smiley,
    _smiley_g1,
    _soft,
    _soft_g1,
)
from ._ptb_patterns import (
    ABBREV1,
    ABBREV3,
    ABBREV4,
    ABBREV_WORDS,
    ACRO,
    APOS,
    APOSETC,
    ASIANSMILEY,
    DIG,
    EMAIL,
    FILENAME,
    FRAC,
    HTHING,
    INSENTP,
    LET,
    LETTER,
    LIKELYURL_PATH,
    MISCSYMBOL,
    NUMBER,
    PHONE,
    QUOTES,
    REDAUX,
    SENTEND,
    SGML,
    SMILEY,
    SPACE,
    SPACENL,
    SREDAUX,
    SWORD,
    THING,
    THINGA,
    WORD,
    _ACRO_FOLLOW,
    _NL,
    _SP,
)

# ---------------------------------------------------------------------------
# Rules, in the grammar's priority order
# ---------------------------------------------------------------------------
# (first characters it may start with -- a regex class body or None for "any" --,
#  pattern, action)
_ANY = None
_RULES: List[Tuple[Optional[str], str, Action]] = [
    # assimilations: "cannot" -> "can" "not", "gonna" -> "gon" "na", "'tis" -> "'t" "is"
    ("cC", r"(?i:cannot)", _pushback(3)),
    ("'", r"'(?i:twas)", _pushback(3)),
    ("'\u0092\u2019&", f"{APOS}(?i:tis)", _pushback(2)),
    ("gGlLwW", r"(?i:gonna|gotta|lemme|gimme|wanna)", _pushback(2)),
    ("cCfF", r"(?i:c)\+\+|(?i:c|f)#", _keep),
    ("<", SGML, _nbsp),
    ("&\u0096\u0097\u2013\u2014\u2015", r"&(?i:md|mdash|ndash);|[\u0096\u0097\u2013\u2014\u2015]",
     _const("--")),
    ("&", r"&(?i:amp);", _const("&")),
    ("&", r"&(?i:ht|tl|ur|lr|qc|ql|qr|odq|cdq|#[0-9]+);", _keep),
    (_ANY, f"({WORD}){REDAUX}", _soft_g1),
    ("A-Za-z\u00ad", f"({SWORD}){SREDAUX}", _soft_g1),
    (_ANY, WORD, _soft),
    # APOWORD, one alternative per pattern so that the longest one wins
    ("'\u0092\u2019&", f"{APOS}(?i:n){APOS}?", _keep),
    ("lLdDjJ", f"[lLdDjJ]{APOS}", _keep),
    ("dDsSoO", f"(?i:dunkin|somethin|ol){APOS}", _keep),
    ("'\u0092\u2019&", f"{APOS}(?:(?i:em)|[2-9]0(?i:s)|(?i:till?)|(?i:cause))", _keep),
    ("A-HJ-XZn", f"[A-HJ-XZn]{APOSETC}{LET}{{2}}{LET}*", _keep),
    (_ANY, f"{LET}+[aeiouyAEIOUY]{APOSETC}[aeiouA-Z]{LET}*", _keep),
    ("cCnNeEsSlL", r"(?i:cont'd\.?|nor'easter|c'mon|e'er|s'mores|ev'ry|li'l|nat'l)", _keep),
    ("oO", f"(?i:o){APOSETC}(?i:o)", _keep),
    ("yY", f"((?i:y){APOS}){LET}", _keep_g1),
    ("hH", r"(?i:https?)://[^ \t\n\f\r\"<>|(){}]+[^ \t\n\f\r\"<>|.!?(){},-]", _keep),
    ("wW", f"(?i:www)\\.(?:[^ \\t\\n\\f\\r\\\"<>|.!?(){{}},]+\\.)+[a-zA-Z]{{2,4}}{LIKELYURL_PATH}",
     _keep),
    (_ANY, f"(?:[^ \\t\\n\\f\\r\\\"`'<>|.!?(){{}},-_$]+\\.)+(?i:com|net|org|edu){LIKELYURL_PATH}",
     _keep),
    ("<&a-zA-Z0-9", EMAIL, _keep),
    ("@", r"@[a-zA-Z_][a-zA-Z_0-9]*", _keep),
    ("#", f"#{LETTER}+", _keep),
    ("'\u0092\u2019&", f"({REDAUX})[^A-Za-z]", _quote_right_g1),
    ("nN", SREDAUX, _quote_right),
    (_ANY, f"{DIG}{{1,2}}[\\-/]{DIG}{{1,2}}[\\-/]{DIG}{{2,4}}", _keep),
    (_ANY, NUMBER, _soft),
    ("\u207a\u207b\u208a\u208b\u2070\u00b9\u00b2\u00b3\u2074-\u2079\u2080-\u2089",
     r"[\u207a\u207b\u208a\u208b]?(?:[\u2070\u00b9\u00b2\u00b3\u2074-\u2079]+|[\u2080-\u2089]+)",
     _keep),
    (_ANY, FRAC, _nbsp),
    ("\u00bc\u00bd\u00be\u2153-\u215e", r"[\u00bc\u00bd\u00be\u2153-\u215e]", _fraction),
    ("-cCpPaAsS", r"-(?i:rrb|lrb|rcb|lcb|rsb|lsb)-|(?i:c\.d\.s|pro-|anti-)"
     r"|(?i:s)(?:&|&(?i:amp);)(?i:p-500|ls)|(?i:cap)" + APOS + "(?i:n)|(?i:c)" + APOS + "(?i:est)",
     _amp),
    ("A-Za-z0-9", r"[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}(?:\\?/[A-Za-z0-9]+(?:-[A-Za-z]+){0,2}){1,2}",
     _keep),
    ("A-Z$#", r"[A-Z]*\$|#", _keep),
    ("\u00a2\u00a3\u00a4\u00a5\u0080\u20a0\u20ac\u060b\u0e3f\u20a4\uffe0\uffe1\uffe5\uffe6",
     r"[\u00a2\u00a3\u00a4\u00a5\u0080\u20a0\u20ac\u060b\u0e3f\u20a4\uffe0\uffe1\uffe5\uffe6]",
     _currency),
    ("A-Za-z", f"({ACRO}\\.){SPACENL}+{_ACRO_FOLLOW}{SPACENL}", _acronym_g1),
    ("cCfFpPnNaAbBoO", f"({ABBREV3}){SPACENL}?{DIG}", _keep_g1),
    ("pPcC", f"((?i:pt)[eyEY]\\.|(?i:co)\\.){SPACE}(?i:ltd|lim)", _keep_g1),
    ("A-Za-z", f"({ABBREV1}){SENTEND}", _period_dup_g1),
    ("A-Za-z", f"({ABBREV1})[\\s\\S]{{2}}", _keep_g1),
    ("A-Za-z", ABBREV1, _period_dup),
    ("A-Za-z", f"{ABBREV4}\\.", _keep),
    ("A-Za-z", f"({ABBREV4}){SPACE}", _keep_g1),
    ("A-Za-z", f"({ACRO}){SPACENL}", _keep_g1),
    ("'\u0092\u2019&", f"({APOS}[0-9][0-9]){SPACENL}", _keep_g1),
    (_ANY, f"({FILENAME})(?:{SPACENL}|[.?!,])", _keep_g1),
    (_ANY, f"({WORD}\\.){INSENTP}", _soft_g1),
    ("(+0-9", PHONE, _phone),
    ('"&', r'("|&(?i:quot);)[A-Za-z0-9$]', _quote_left_g1),
    ('"&', r'"|&(?i:quot);', _quote_right),
    ("\x7f", "\x7f", _drop),
    ("<&", r"<|&(?i:lt);", _const("<")),
    (">&", r">|&(?i:gt);", _const(">")),
    ("<>:;=", f"({SMILEY})[^A-Za-z0-9]", _smiley_g1),
    ("\\^x=~<>'(\\-", ASIANSMILEY, _smiley),
    ("{", r"\{", _const("-LCB-")),
    ("}", r"\}", _const("-RCB-")),
    ("\\[", r"\[", _const("-LSB-")),
    ("\\]", r"\]", _const("-RSB-")),
    ("(", r"\(", _const("-LRB-")),
    (")", r"\)", _const("-RRB-")),
    ("-", r"-+", _hyphens),
    (".\u0085\u2026", r"\.{3,5}|(?:\.[ \u00a0]){2,4}\.|[\u0085\u2026]", _const("...")),
    ("@#_", r"@+|#+|_+", _keep),
    ("*\\\\", r"\*+|(?:\\\*){1,3}", _keep),
    (",;:\u3001", INSENTP, _keep),
    ("?!", r"[?!]+", _keep),
    (".", r"\.", _keep),
    ("=", "=", _keep),
    ("/", "/", _keep),
    ("A-Za-z0-9", f"({HTHING}\\.){INSENTP}", _soft_g1),
    ("A-Za-z0-9", HTHING, _soft),
    (_ANY, f"({THING}\\.){INSENTP}", _keep_g1),
    (_ANY, THING, _keep),
    ("A-Z", f"({THINGA}\\.){INSENTP}", _amp_g1),
    ("A-Z", THINGA, _amp),
    ("'", r"(')[A-Za-z][^ \t\n\r\u00a0]", _quote_left_g1),
    ("'\u0092\u2019&", REDAUX, _quote_right),
    (_ANY, QUOTES, _quote_right),
    ("<>", r"<<|>>", _keep),
    (_ANY, MISCSYMBOL, _keep),
    (f"\x00{_SP}\u200b\u200e\u200f\ufeff", f"\x00|{SPACE}+|[\u200b\u200e\u200f\ufeff]", _drop),
    (_NL, r"\r\n|[\r\n\u2028\u2029\x0b\x0c\x85]", _newline),
    ("&", r"&(?i:nbsp);", _drop),
]


# ---------------------------------------------------------------------------
# The scanner
# ---------------------------------------------------------------------------
_Compiled = Tuple[re.Pattern, Action]
# Each rule's first-character class is compiled now (cheap); its pattern only when a text first
# needs it (compiling all 87 at import took ~80 ms of every `catcap evaluate` process, and the
# shortcuts below read most captions without them).
_FIRSTS: List[Optional[re.Pattern]] = [
    None if first is None else re.compile(f"[{first}]", re.IGNORECASE) for first, _, _ in _RULES
]
_PATTERNS: dict = {}
_CANDIDATES: dict = {}


def _rule(i: int, ascii_only: bool) -> _Compiled:
    """Rule ``i`` of :data:`_RULES`, compiled on first use; ``ascii_only``: its classes cut to
    ASCII, for text with no other characters (same matches there; :mod:`._ptb_ascii`)."""
    found = _PATTERNS.get((i, ascii_only))
    if found is None:
        pattern = ascii_pattern(_RULES[i][1]) if ascii_only else _RULES[i][1]
        found = _PATTERNS[i, ascii_only] = (re.compile(pattern), _RULES[i][2])
    return found


def _candidates(char: str, ascii_only: bool = False) -> Tuple[_Compiled, ...]:
    """Rules that can start with ``char``, in priority order (memoised per character)."""
    found = _CANDIDATES.get((char, ascii_only))
    if found is None:
        found = tuple(_rule(i, ascii_only) for i, first in enumerate(_FIRSTS)
                      if first is None or first.match(char))
        _CANDIDATES[char, ascii_only] = found
    return found


_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _to_utf16(match: re.Match) -> str:
    code = ord(match.group(0)) - 0x10000
    return chr(0xD800 + (code >> 10)) + chr(0xDC00 + (code & 0x3FF))


# Shortcuts for the overwhelmingly common tokens (after optional spaces).  Each
# alternative only fires where no rule of the grammar can give a longer (or an
# equally long, earlier) match; "end" means a space or the end of the text:
#   n  a number before [,;:.] + end, before spaces + a letter, or at the end
#      (a number, a space and a digit can be one token: "555 1234 567", "5 1/2");
#   w  an ASCII word before an optional [,;:] + end ("cannot" & co. are split:
#      _shortcut);  v  an ASCII word before a period + end (not an abbreviation);
#   h  a hyphenated ASCII word starting with a letter, same contexts;
#   c  an ASCII word before a clitic ('s 'd 'm 're 've 'll) + [,;:.!?] + end
#      (not "cont", for "cont'd.");
#   p  , ; or : before an end;  d  a period not starting ". . .";
#   q  a double quote (`` before a letter, a digit or $, else '');
#   s  a clitic before a non-letter ('re 've 'll at the very end of the text
#      are read by the jar as a quote and a word).
_FAST = re.compile(
    r" *(?:(?P<n>[0-9]+)(?=[,;:.](?: |\Z)| +[A-Za-z]|\Z)"
    r"|(?P<w>[0-9]*[A-Za-z][A-Za-z0-9]*)(?=[,;:]?(?: |\Z))"
    r"|(?P<v>[0-9]*[A-Za-z][A-Za-z0-9]*)(?=\.(?: |\Z))"
    r"|(?P<h>[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+)(?=[,;:.]?(?: |\Z))"
    r"|(?P<c>[A-Za-z]+)(?='(?:[sSdDmM]|(?i:re|ve|ll))[,;:.!?]?(?: |\Z))"
    r"|(?P<p>[,;:])(?= |\Z)"
    r"|(?P<d>\.)(?= (?!\.)|\Z)"
    r"|(?P<q>\")"
    r"|(?P<s>'[sSdDmM](?=[^A-Za-z]|\Z)|'(?i:re|ve|ll)(?=[^A-Za-z])))"
).match
_SPACES = re.compile(f"{SPACE}+").match
#: Words the jar splits (ASSIMILATIONS): not for the shortcuts.
SPLIT_WORDS = frozenset(["cannot", "gonna", "gotta", "lemme", "gimme", "wanna"])
_LEFT_QUOTE_CONTEXT = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789$"
)
_CHECKED = frozenset("wvcq")


def _shortcut(kind: str, tok: str, end: int, text: str) -> Optional[str]:
    """The token of a :data:`_FAST` match of kind w/v/c/q, or ``None`` to apply the full rules."""
    if kind == "q":
        return "``" if end < len(text) and text[end] in _LEFT_QUOTE_CONTEXT else "''"
    if kind == "v":  # a word before a period: abbreviation?
        low = tok.lower()
        return None if low in ABBREV_WORDS or low in SPLIT_WORDS else tok
    if 5 <= len(tok) <= 6:
        low = tok.lower()
        if low in SPLIT_WORDS:
            return None
    if kind == "c" and tok.lower() == "cont":  # "cont'd." is one token
        return None
    return tok


def lex(text: str, shortcuts: bool = True) -> List[str]:
    """Raw PTB tokens of ``text`` (before lower-casing); line breaks give :data:`NEWLINE_TOKEN`.

    ``text`` is scanned as the jar scans a whole input file: longest match, ties
    to the earlier rule, untokenizable characters deleted.  ``shortcuts=False``
    applies the full rule set at every token (slower, same result; for tests).
    """
    astral = _ASTRAL.search(text) is not None
    if astral:  # the jar works on UTF-16 code units
        text = _ASTRAL.sub(_to_utf16, text)
    ascii_only = text.isascii()  # then every rule may run in its ASCII form (:mod:`._ptb_ascii`)
    tokens: List[str] = []
    append = tokens.append
    pos = 0
    n = len(text)
    while pos < n:
        if shortcuts:
            m = _FAST(text, pos)
            if m is not None:
                kind = m.lastgroup
                tok = m.group(kind)
                if kind in _CHECKED:
                    tok = _shortcut(kind, tok, m.end(), text)
                if tok is not None:
                    append(tok)
                    pos = m.end()
                    continue
        if text[pos] == " ":  # a run of spaces is one (deleted) SPACES token
            pos = _SPACES(text, pos).end()
            continue
        pos = _longest_match(text, pos, append, ascii_only)
    if astral:
        tokens = [t.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
                  for t in tokens]
    return tokens


def _longest_match(text: str, pos: int, append: Callable[[str], None], ascii_only: bool = False) -> int:
    """Apply the grammar at ``pos``: emit the token (if any), return where to resume
    (``ascii_only``: ``text`` is ASCII, so the rules' ASCII forms apply)."""
    best = None
    best_len = 0
    for rx, act in _candidates(text[pos], ascii_only):
        m = rx.match(text, pos)
        if m is not None:
            length = m.end() - pos
            if length > best_len:
                best_len = length
                best = (m, act)
    if best is None:  # untokenizable: the jar deletes it (and logs a warning)
        return pos + 1
    tok, pos = best[1](best[0], pos)
    if tok is not None:
        append(tok)
    return pos
