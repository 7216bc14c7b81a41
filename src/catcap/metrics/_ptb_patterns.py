"""Macros of the Stanford CoreNLP 3.4.1 PTB lexer as Python regex fragments (JFlex names kept).

See :mod:`._ptb_rules` for how they are used.
"""

from __future__ import annotations

from typing import List

from ._ptb_charsets import DIGIT as _DIG_BODY
from ._ptb_charsets import LETTER as _LET_BODY
from ._ptb_charsets import LETTER_EXTRA as _LETX_BODY
from ._ptb_charsets import MISC as _MISC_BODY
from ._ptb_charsets import UPPER as _UP_BODY

#: Marker the lexer emits for a line break inside the text (JFlex NEWLINE).
NEWLINE_TOKEN = "\n"

# ---------------------------------------------------------------------------
# Macros (JFlex names kept so the rules can be compared with the grammar)
# ---------------------------------------------------------------------------
_SP = r" \t\u00a0\u2000-\u200a\u3000"
_NL = r"\r\n\u2028\u2029\x0b\x0c\x85"
SPACE = f"[{_SP}]"
SPACENL = f"[{_SP}{_NL}]"
LET = f"[{_LET_BODY}]"  # [:letter:]
DIG = f"[{_DIG_BODY}]"  # [:digit:]
ALNUM = f"[{_LET_BODY}{_DIG_BODY}]"
UPPER = f"[{_UP_BODY}]"
SPLET = r"&[aeiouAEIOU](?i:acute|grave|uml);"
LETTER = f"(?:[{_LET_BODY}{_LETX_BODY}]|{SPLET})"
LETTER_OR_DIGIT = f"(?:[{_LET_BODY}{_LETX_BODY}{_DIG_BODY}]|{SPLET})"
WORD = f"{LETTER}{LETTER_OR_DIGIT}*(?:[.!?]{LETTER}{LETTER_OR_DIGIT}*)*"
APOS = r"(?:['\u0092\u2019]|&(?i:apos);)"
APOSETC = r"(?:['`\u0092\u2019\u0091\u2018\u201b]|&(?i:apos);)"
HYPHEN = r"[\-_\u058a\u2010\u2011]"
NUM = f"(?:{DIG}*(?:[.:,\u00ad\u066b\u066c]{DIG}+)+|{DIG}+)"
NUMBER = f"[\\-+]?{NUM}"
ACRO = r"(?:[A-Za-z](?:\.[A-Za-z])*|(?i:canada|sino|korean|eu|japan|non)-(?i:u\.s)|(?i:u\.s\.-)(?i:u\.k|u\.s\.s\.r))"
REDAUX = f"{APOS}(?:[msdMSD]|(?i:re|ve|ll))"
SREDAUX = f"(?i:n){APOSETC}(?i:t)"
SWORD = r"[A-Za-z\u00ad]*[A-MO-Za-mo-z]\u00ad*"
SGML = (
    r"<(?:[!?][A-Za-z\-][^>\r\n]*|[A-Za-z][A-Za-z0-9_:.\-]*"
    r"(?:[ ]+(?:[A-Za-z][A-Za-z0-9_:.\-]*[ ]*=[ ]*(?:'[^']*'|\"[^\"]*\")|[A-Za-z][A-Za-z0-9_:.\-]*))*"
    r"[ ]*/?|/[A-Za-z][A-Za-z0-9_:.\-]*)[ ]*>"
)
SENTEND = f"{SPACENL}(?:{SPACENL}|{UPPER}|{SGML})"
INSENTP = r"[,;:\u3001]"
THING_PART = f"(?:[dDoOlL]{APOSETC}{ALNUM})?{ALNUM}+"
THING = f"{THING_PART}(?:{HYPHEN}{THING_PART})*"
ACRO2 = r"(?:[A-Za-z](?:\.[A-Za-z])+|(?i:canada|sino|korean|eu|japan|non)-(?i:u\.s)|(?i:u\.s\.-)(?i:u\.k|u\.s\.s\.r))"
HTHING = f"[A-Za-z0-9][A-Za-z0-9.,\u00ad]*(?:-(?:{ACRO2}\\.|[A-Za-z0-9\u00ad]+))+"
THINGA = r"[A-Z]+(?:(?:[+&]|&(?i:amp);)[A-Z]+)+"


def _caseless(words: List[str]) -> str:
    return "(?i:" + "|".join(words) + ")"


def _first_cased(words: List[str]) -> str:
    """JFlex ``[A]rk``: first letter case-sensitive, the rest caseless."""
    return "|".join(w[0] + "(?i:" + w[1:] + ")" for w in words)


# Abbreviations (ABBREV1: usually followed by lower case; a following capital
# or end of text makes the jar repeat the period as a sentence end).
_ABBREV1_WORDS = (
    "jan feb mar apr jun jul aug sep sept oct nov dec "  # months ("May." is no abbreviation)
    "mon tue tues wed thu thurs fri "  # days
    "ala ariz calif colo conn ct dak fla ga ind kan kans ky md mich minn mo mont neb nev okla "
    "penn tenn va vt wis wisc wyo "  # states
    "inc co cos corp pty ptys pte ptes ppty pptys ppte pptes ltd plc rt bancorp bhd assn univ "
    "intl sys tel est ext sq jr sr bros blvd rd esq etc al seq bldg"
).split()
_ABBREV1_CASED = "Az Ark Del Ill La Mass Miss Ore Pa Tex Wash".split()
_DOTTED1 = [r"ed\.d", r"ph\.d"]
ABBREV1 = f"(?:{_caseless(_ABBREV1_WORDS + _DOTTED1)}|{_first_cased(_ABBREV1_CASED)})\\."
# ABBREV4 (+ period = ABBREV2): titles etc., usually followed by a capital.
_ABBREV4_WORDS = (
    "mr mrs ms dr drs prof profs sen sens rep reps atty attys lt col gen messrs gov govs adm rev "
    "maj sgt cpl pvt capt st ste ave pres lieut hon brig cmdr comdr pfc spc supt supts det mt ft "
    "adj adv asst assoc ens insp mlle mme msgr sfc vs alex wm jos cie cf treas ph "
    "invt elec natl mfg mtg dept"
).split()
_DOTTED4 = [r"a\.k\.a"]
ABBREV4 = f"(?:{ACRO}|{_caseless(_ABBREV4_WORDS + _DOTTED4)}|M(?i:iss))"
# ABBREV3: abbreviations only before a number ("fig. 3").
_ABBREV3_WORDS = "ca fig figs prop no nos art bldg pp op".split()
ABBREV3 = f"{_caseless(_ABBREV3_WORDS)}\\."
#: Lower-cased words that, followed by a period, may form an abbreviation token
#: (a superset: single letters too).  Used to keep the shortcuts off them.
ABBREV_WORDS = frozenset(
    [w.lower() for w in _ABBREV1_WORDS + _ABBREV1_CASED + _ABBREV4_WORDS + _ABBREV3_WORDS]
    + list("abcdefghijklmnopqrstuvwxyz")
)
_ACRO_FOLLOWERS = (
    "About|According|Additionally|After|An|A|As|At|But|Earlier|He|Her|Here|However|If|In|It"
    "|Last|Many|More|Mr\\.|Ms\\.|Now|Once|One|Other|Our|She|Since|So|Some|Such|That|The|Their|Then"
    "|There|These|They|This|We|When|While|What|Yet|You"
)
# [A]bout etc.: the first letter is case-sensitive, the rest caseless.
_ACRO_FOLLOW = "(?:" + "|".join(w[0] + "(?i:" + w[1:] + ")" if len(w) > 1 else w
                                 for w in _ACRO_FOLLOWERS.split("|")) + f"|{SGML})"
FRAC = f"(?:{DIG}{{1,4}}[\\- \u00a0])?{DIG}{{1,4}}(?:\\\\?/|\u2044){DIG}{{1,4}}"
PHONE = (
    r"(?:\([0-9]{2,3}\)[ \u00a0]?|(?:\+\+?)?(?:[0-9]{2,4}[\- \u00a0])?[0-9]{2,4}[\- \u00a0])"
    r"[0-9]{3,4}[\- \u00a0]?[0-9]{3,5}|(?:(?:\+\+?)?[0-9]{2,4}\.)?[0-9]{2,4}\.[0-9]{3,4}\.[0-9]{3,5}"
)
_URLNOT = "[^ \\t\\n\\f\\r\\\"<>|()]"
_URLEND = "[^ \\t\\n\\f\\r\\\"<>|.!?(){},-]"
LIKELYURL_PATH = f"(?:/{_URLNOT}+{_URLEND})?"
EMAIL = (
    r"(?:&(?i:lt);|<)?[a-zA-Z0-9][^ \t\n\f\r\"<>|(){}\u00a0]*@(?:[^ \t\n\f\r\"<>|(){}.\u00a0]+\.)*"
    r"[^ \t\n\f\r\"<>|(){}.\u00a0]+(?:&(?i:gt);|>)?"
)
_FILENAME_EXT = (
    "bat|bmp|c|class|cgi|cpp|dll|doc|docx|exe|gif|gz|h|htm|html|jar|java|jpeg|jpg|mov|mp3|pdf"
    "|php|pl|png|ppt|ps|py|sql|tar|txt|wav|x|xml|zip"
)
FILENAME = f"{LETTER_OR_DIGIT}+(?:\\.{LETTER_OR_DIGIT}+)*\\.(?i:{_FILENAME_EXT})"
MISCSYMBOL = f"[+%&~^|\\\\{_MISC_BODY}]"
QUOTES = (
    f"''|[`\u2018\u2019\u201a\u201b\u201c\u201d\u0091\u0092\u0093\u0094\u201e\u201f"
    f"\u2039\u203a\u00ab\u00bb]{{1,2}}|{APOS}"
)
SMILEY = r"[<>]?[:;=][\-o*']?[()DPdpO\\{@|\[\]]"
ASIANSMILEY = (
    r"[\^x=~<>]\.\[\^(?i:x)=~<>\]|[\-\^x=~<>']_[\-\^x=~<>']|\([\-\^x=~<>'][_.]?[\-\^x=~<>']\)"
)
