"""Tests of catcap's pure-Python copy of pycocoevalcap's PTB tokenizer.

Every expected string below is what pycocoevalcap's Stanford CoreNLP 3.4.1 jar
printed for the caption tokenized alone (after the toolkit's punctuation
removal); ``data/ptb_sample.jsonl.gz`` holds the jar's output for a few thousand
real COCO captions (all odd patterns found in COCO) and synthetic strings, so
no Java is needed here.  ``benchmarks/tokenizer_parity.py`` re-checks all COCO.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from catcap.metrics import tokenizer
from catcap.metrics._ptb_patterns import NEWLINE_TOKEN
from catcap.metrics._ptb_rules import lex
from catcap.metrics.tokenizer import PUNCTUATIONS, ptb_tokenize, tokenize_captions

SAMPLE = Path(__file__).parent / "data" / "ptb_sample.jsonl.gz"

# (caption, what pycocoevalcap produces for it) -- outputs copied from the jar.
CASES = [
    # the plain common case, with and without the final period
    ("A man riding a wave on top of a surfboard.", "a man riding a wave on top of a surfboard"),
    ("a man riding a wave on top of a surfboard", "a man riding a wave on top of a surfboard"),
    ("A cat.", "a cat"),
    ("Two cats .", "two cats"),
    ("A 2 3 4 sign", "a 2 3 4 sign"),
    # contractions, possessives, assimilations
    ("A dog's bed isn't here.", "a dog 's bed is n't here"),
    ("The kids' toys aren't on the table, they're outside.",
     "the kids toys are n't on the table they 're outside"),
    ("I can't believe it won't fit; you'd think we'll manage.",
     "i ca n't believe it wo n't fit you 'd think we 'll manage"),
    ("cannot gonna wanna gotta lemme gimme", "can not gon na wan na got ta lem me gim me"),
    ("A man's and woman's hands.", "a man 's and woman 's hands"),
    ("He's like 'whatever'.", "he 's like whatever"),
    ("ABC's logo, DON'T WALK sign", "abc 's logo do n't walk sign"),
    ("A TV showing CNN's news", "a tv showing cnn 's news"),
    ("50's style diner from the '50s", "50 's style diner from the '50s"),
    ("The clock shows 12 o'clock and rock'n'roll plays.",
     "the clock shows 12 o'clock and rock 'n' roll plays"),
    ("Y'all and ma'am", "y' all and ma'am"),
    ("Its tail's up; it's 5'11\" tall.", "its tail 's up it 's 5 11 tall"),
    # brackets are kept (lower-cased, so not in the toolkit's list)
    ("A sign (on the left) reads [STOP] and {GO}.",
     "a sign -lrb- on the left -rrb- reads -lsb- stop -rsb- and -lcb- go -rcb-"),
    ("Zebras (and giraffes) graze.", "zebras -lrb- and giraffes -rrb- graze"),
    ("A pizza with pepperoni :) and olives :-(", "a pizza with pepperoni :-rrb- and olives -lrb-"),
    # hyphens and dashes
    ("A black-and-white photo of a well-known double-decker bus.",
     "a black-and-white photo of a well-known double-decker bus"),
    ("x-ray, e-mail, T-shirt, 3-D, 9-year-old, U.S.-based",
     "x-ray e-mail t-shirt 3-d 9-year-old u.s.-based"),
    ("A dog -- or a wolf --- or ----- a fox - maybe.", "a dog or a wolf or ----- a fox maybe"),
    ("It is a cat's - or dog's - toy", "it is a cat 's or dog 's toy"),
    # symbols that survive
    ("Fish & chips, 50% off, #1 seller, salt/pepper shakers!!!",
     "fish & chips 50 % off # 1 seller salt/pepper shakers !!!"),
    ("What is this?! Wow!!", "what is this ?! wow !!"),
    ("!!!", "!!!"),
    ("A #hashtag and @user handle", "a #hashtag and @user handle"),
    ("AT&T and R&D and S&P-500 and a&b.", "at&t and r&d and s&p-500 and a & b."),
    ("A <b>bold</b> move & &amp; entity &quot;quoted&quot;.",
     "a <b> bold </b> move & & entity quoted"),
    # numbers, fractions, currencies
    ("\u00bd a sandwich and \u00bc of a pie, 2\u00be cups", "1/2 a sandwich and 1/4 of a pie 2 3/4 cups"),
    ("A table with 5 1/2 pizzas and 3/4 of a cake on 12/25/2014.",
     "a table with 5\u00a01/2 pizzas and 3/4 of a cake on 12/25/2014"),
    ("Numbers like 1,000 and 3.14 and 10:30 and -5 and 2,500,000.",
     "numbers like 1,000 and 3.14 and 10:30 and -5 and 2,500,000"),
    ("Call 555-1234 or (555) 555-1234 now", "call 555-1234 or -lrb-555-rrb-\u00a0555-1234 now"),
    ("Price \u20ac5 or \u00a33 or \u00a510 or 25\u00a2.", "price $ 5 or # 3 or \u00a5 10 or 25 cents"),
    # quotes are dropped
    ("A \"vintage\" car with a 'classic' look.", "a vintage car with a classic look"),
    ("He said `hi' and ``bye''.", "he said hi and bye"),
    ("A 'sign' that says 'no'", "a sign that says no"),
    ("The end'", "the end"),
    ("\u201cHello\u201d and \u2018bye\u2019 written on a wall \u2014 in red \u2013 paint\u2026",
     "hello and bye written on a wall in red paint"),
    # abbreviations keep their period; acronyms
    ("Mr. Smith walks down Main St. in Washington D.C. at 5 p.m. with Dr. Who.",
     "mr. smith walks down main st. in washington d.c. at 5 p.m. with dr. who"),
    ("The sign says Acme Co. and U.S.A.", "the sign says acme co. and u.s.a."),
    ("the letter I.", "the letter i."),
    ("A bus going to St. Louis, Mo. on Jan. 5.", "a bus going to st. louis mo. on jan. 5"),
    ("Plates on a table in an o.k. restaurant", "plates on a table in an o.k. restaurant"),
    ("e.g. a dog, i.e. a pet", "e.g. a dog i.e. a pet"),
    # urls, e-mails, file names
    ("Visit http://www.example.com/page?x=1 or www.coco.org or mail me@example.com.",
     "visit http://www.example.com/page?x=1 or www.coco.org or mail me@example.com"),
    ("photo.jpg and file.txt names", "photo.jpg and file.txt names"),
    # ellipses and punctuation
    ("Wait... what... ok . . . fine", "wait what ok fine"),
    ("A man, a plan, a canal: Panama.", "a man a plan a canal panama"),
    (".", ""),
    # unicode: spaces, letters, unknown characters
    ("A \u201cno\u00a0parking\u201d sign\u00a0next to a\u2009bus.", "a no parking sign next to a bus"),
    ("Caf\u00e9 with na\u00efve cr\u00e8me br\u00fbl\u00e9e.", "caf\u00e9 with na\u00efve cr\u00e8me br\u00fbl\u00e9e"),
    ("A \U0001F436 dog emoji and \u2764 heart.", "a dog emoji and \u2764 heart"),
    ("Soft\u00adhyphen and zero\u200bwidth", "softhyphen and zero width"),
    ("a \u201eb\u201c \u201ab\u2018 \u201fb\u201f", "a \u201e b \u201a b \u201f b \u201f"),
    # line breaks inside a caption: tokens of the caption alone, lines joined
    ("A Line\rbreak inside", "a line break inside"),
    ("Form\x0cfeed and\u2028separator and next\x85line", "form feed and separator and next line"),
    ("two\nlines", "two lines"),
    # empty captions
    ("", ""),
    ("   ", ""),
]


def test_punctuations_are_the_toolkits():
    assert PUNCTUATIONS == frozenset([
        "''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-",
        ".", "?", "!", ",", ":", "-", "--", "...", ";",
    ])
    assert isinstance(PUNCTUATIONS, frozenset)


@pytest.mark.parametrize("caption, expected", CASES)
def test_jar_output(caption, expected):
    tokens = ptb_tokenize(caption)
    assert " ".join(tokens) == expected
    assert all(tokens), "no empty tokens"


def _rules_only(caption):
    """The toolkit string from the full rule set alone (no shortcut, no fast path)."""
    tokens = (tokenizer.java_lower(t) for t in lex(caption.replace("\n", " "), shortcuts=False))
    return " ".join(t for t in tokens if t != NEWLINE_TOKEN and t not in PUNCTUATIONS)


@pytest.mark.parametrize("caption, expected", CASES)
def test_full_rules_agree_with_fast_paths(caption, expected):
    assert _rules_only(caption) == expected


def test_empty_and_blank():
    assert ptb_tokenize("") == []
    assert ptb_tokenize(" \t\u00a0 ") == []
    assert ptb_tokenize("...") == []


def test_tokenize_captions_contract():
    captions = {
        "b": ["A dog's toy.", "Two cats"],
        1: ["(hello)"],
        "empty": [],
        "a": ["", "x-ray"],
    }
    out = tokenize_captions(captions)
    assert out == {"b": ["a dog 's toy", "two cats"], 1: ["-lrb- hello -rrb-"], "a": ["", "x-ray"]}
    assert list(out) == ["b", 1, "a"]  # input order; keys without captions dropped like the toolkit
    assert tokenize_captions({}) == {}


def test_tokenize_captions_accepts_tuples_and_any_mapping():
    from collections import OrderedDict

    out = tokenize_captions(OrderedDict([(3, ("A bird.", "Letter B."))]))
    assert out == {3: ["a bird", "letter b."]}  # a single letter + period is an abbreviation


def _sample():
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_sample_is_substantial():
    rows = _sample()
    assert len(rows) > 3000
    assert {row["source"] for row in rows} == {"coco", "synthetic"}


def test_parity_on_committed_sample():
    failures = []
    for row in _sample():
        got = " ".join(ptb_tokenize(row["caption"]))
        if got != row["expected"]:
            failures.append((row["caption"], got, row["expected"]))
    assert not failures, "\n".join(f"{c!r}: got {g!r}, jar {e!r}" for c, g, e in failures[:10])


def test_full_rules_parity_on_committed_sample():
    """The shortcuts change nothing: the full rule set alone gives the same result."""
    failures = [row["caption"] for row in _sample() if _rules_only(row["caption"]) != row["expected"]]
    assert not failures, failures[:10]


def test_java_lower_keeps_letters_java_17_does_not_know():
    assert tokenizer.java_lower("ABC\u00c9") == "abc\u00e9"
    assert tokenizer.java_lower("X\u2c2fY") == "x\u2c2fy"  # Glagolitic letter added in Unicode 14


def test_module_imports_nothing_else_from_catcap():
    import ast

    for name in ("tokenizer.py", "_ptb_rules.py", "_ptb_patterns.py", "_ptb_actions.py", "_ptb_charsets.py"):
        src = (Path(tokenizer.__file__).parent / name).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert not (node.module or "").startswith("catcap"), (name, node.module)
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                raise AssertionError(f"{name} imports outside catcap.metrics")
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("catcap") for a in node.names), name


def _random_strings(n, seed=1234):
    """Deterministic junk mixing words, digits, ASCII punctuation and some unicode."""
    import random

    rng = random.Random(seed)
    pieces = (list("abcdefghijklmnopqrstuvwxyz") + ["The", "U.S.", "Mr.", "co.", "n't", "'s", "&amp;",
              "http://x.org/a", "x@y.com", "1/2", "555", "1,000", ":)", "...", "--", "\u00bd", "\u201c",
              "\u2019", "\u2014", "\u00e9", "\u00a0", "\U0001F600", "<b>", "(", ")", "[", "]"]
              + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~0123456789"))
    out = []
    for _ in range(n):
        parts = [rng.choice(pieces) + (" " if rng.random() < 0.5 else "") for _ in range(rng.randint(1, 8))]
        out.append("".join(parts))
    return out


@pytest.mark.java
def test_live_against_the_jar(java_available, tmp_path):
    """Each string tokenized alone by the real jar (one input file per string)."""
    import subprocess

    pycocoevalcap = pytest.importorskip("pycocoevalcap")
    jar = Path(list(pycocoevalcap.__path__)[0]) / "tokenizer" / "stanford-corenlp-3.4.1.jar"
    texts = [c for c, _ in CASES] + _random_strings(300)
    names = []
    for i, text in enumerate(texts):
        name = tmp_path / f"{i}.txt"
        name.write_bytes(text.replace("\n", " ").encode("utf-8"))
        names.append(str(name))
    (tmp_path / "list").write_text("\n".join(names) + "\n")
    subprocess.run(["java", "-cp", str(jar), "edu.stanford.nlp.process.PTBTokenizer", "-preserveLines",
                    "-lowerCase", "-ioFileList", str(tmp_path / "list")], check=True, capture_output=True)
    failures = []
    for text, name in zip(texts, names):
        lines = Path(name + ".tok").read_bytes().decode("utf-8").split("\n")
        expected = " ".join(w for line in lines for w in line.rstrip().split(" ")
                            if w and w not in PUNCTUATIONS)
        if " ".join(ptb_tokenize(text)) != expected:
            failures.append((text, " ".join(ptb_tokenize(text)), expected))
    assert not failures, failures[:5]
