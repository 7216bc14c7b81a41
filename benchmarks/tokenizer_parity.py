"""Parity and speed of catcap's pure-Python PTB tokenizer against pycocoevalcap's jar.

Extracts the COCO 2014 caption files shipped inside pycocoevalcap's SPICE jar
into ``benchmarks/_work/`` (git-ignored), tokenizes all 616,767 captions with
``catcap.metrics.tokenizer.ptb_tokenize`` (timed) and with pycocoevalcap's own
``PTBTokenizer`` (the Stanford CoreNLP 3.4.1 jar, one batch, timed), and
compares the two token strings caption by caption.

The toolkit tokenizes a batch as one text, so the jar sometimes looks past the
end of a caption into the next one (``... letter I.`` + ``It is ...``), while
catcap tokenizes each caption alone.  Every caption whose strings differ is
therefore run through the jar again, alone in its own input file
(``-ioFileList``); only a difference from that "alone" output counts as a
mismatch.  The others are reported as context effects of the batch.

Usage::

    python benchmarks/tokenizer_parity.py            # full parity + speed
    python benchmarks/tokenizer_parity.py --limit 50000
    python benchmarks/tokenizer_parity.py --make-sample tests/metrics/data/ptb_sample.jsonl.gz

``--make-sample`` writes the committed test sample instead: every distinct
"odd" pattern found in the COCO captions (any character outside
``[a-z0-9 .,]`` after lower-casing, seen with its neighbours), some ordinary
captions and a few synthetic strings (unicode quotes, dashes, fractions,
brackets, URLs...), each with the jar's output for it alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from catcap.metrics.tokenizer import PUNCTUATIONS, ptb_tokenize, tokenize_captions  # noqa: E402

WORK = ROOT / "benchmarks" / "_work"
CAPTION_FILES = ("coco/annotations/captions_train2014.json", "coco/annotations/captions_val2014.json")
# Characters the jar reads as line breaks (besides "\n", which the toolkit replaces).
JAR_LINE_BREAKS = re.compile("[\r\x0b\x0c\u2028\u2029]")


def log(msg: str) -> None:
    """Progress message with a timestamp."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pycocoevalcap_dir() -> Path:
    """Installed pycocoevalcap package directory."""
    import pycocoevalcap  # a namespace package: no __file__

    return Path(list(pycocoevalcap.__path__)[0]).resolve()


def corenlp_jar() -> Path:
    """The Stanford CoreNLP 3.4.1 jar pycocoevalcap runs."""
    return pycocoevalcap_dir() / "tokenizer" / "stanford-corenlp-3.4.1.jar"


def load_coco_captions() -> List[str]:
    """All COCO 2014 train+val captions (annotation order), extracted from the SPICE jar once."""
    WORK.mkdir(parents=True, exist_ok=True)
    captions: List[str] = []
    spice = pycocoevalcap_dir() / "spice" / "spice-1.0.jar"
    for member in CAPTION_FILES:
        target = WORK / Path(member).name
        if not target.exists():
            log(f"extracting {member} from {spice.name}")
            with zipfile.ZipFile(spice) as zf, open(target, "wb") as out:
                shutil.copyfileobj(zf.open(member), out)
        with open(target, encoding="utf-8") as f:
            captions.extend(a["caption"] for a in json.load(f)["annotations"])
    return captions


def jar_alone(captions: Sequence[str], batch: int = 20000) -> List[str]:
    """The toolkit's string for each caption tokenized alone (one input file per caption)."""
    results: List[str] = []
    for first in range(0, len(captions), batch):
        chunk = captions[first:first + batch]
        tmp = Path(tempfile.mkdtemp(prefix="ptb_alone_", dir=WORK))
        try:
            names = []
            for i, cap in enumerate(chunk):
                name = tmp / f"{i}.txt"
                name.write_bytes(cap.replace("\n", " ").encode("utf-8"))
                names.append(str(name))
            (tmp / "list").write_text("\n".join(names) + "\n")
            subprocess.run(["java", "-cp", str(corenlp_jar()), "edu.stanford.nlp.process.PTBTokenizer",
                            "-preserveLines", "-lowerCase", "-ioFileList", str(tmp / "list")],
                           check=True, capture_output=True)
            for name in names:
                lines = Path(name + ".tok").read_bytes().decode("utf-8").split("\n")
                words = [w for line in lines for w in line.rstrip().split(" ")
                         if w and w not in PUNCTUATIONS]
                results.append(" ".join(words))
        finally:
            shutil.rmtree(tmp)
    return results


def jar_batch(captions: Sequence[str]) -> List[str]:
    """pycocoevalcap's PTBTokenizer on all captions at once (the real toolkit call)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    res = PTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(captions)})
    return [res[i][0] if i in res else "" for i in range(len(captions))]


def time_ours(captions: Sequence[str]) -> Dict[str, float]:
    """Seconds taken by ptb_tokenize over all captions and by tokenize_captions (5 per key)."""
    t0 = time.perf_counter()
    for cap in captions:
        ptb_tokenize(cap)
    t1 = time.perf_counter()
    grouped = {i: captions[i:i + 5] for i in range(0, len(captions), 5)}
    t2 = time.perf_counter()
    tokenize_captions(grouped)
    t3 = time.perf_counter()
    return {"ptb_tokenize": t1 - t0, "tokenize_captions": t3 - t2}


def parity(args: argparse.Namespace) -> int:
    """Full comparison; prints a report and returns the number of real mismatches."""
    captions = load_coco_captions()
    if args.limit:
        captions = captions[: args.limit]
    n = len(captions)
    log(f"{n} captions; python {platform.python_version()}, {os.cpu_count()} cpus")

    log("catcap tokenizer: timing ...")
    timing = time_ours(captions)
    ours = [" ".join(ptb_tokenize(c)) for c in captions]
    log(f"  ptb_tokenize: {timing['ptb_tokenize']:.2f} s = {n / timing['ptb_tokenize']:,.0f} captions/s"
        f" ({timing['ptb_tokenize'] / n * 1e6:.1f} us/caption)")
    log(f"  tokenize_captions: {timing['tokenize_captions']:.2f} s")

    # captions with jar line breaks would shift the batch: they are checked alone only
    plain = [i for i, c in enumerate(captions) if not JAR_LINE_BREAKS.search(c)]
    log(f"pycocoevalcap PTBTokenizer (jar) on {len(plain)} captions in one batch ...")
    t0 = time.perf_counter()
    batch = jar_batch([captions[i] for i in plain])
    t_jar = time.perf_counter() - t0
    log(f"  jar: {t_jar:.2f} s = {len(plain) / t_jar:,.0f} captions/s")
    reference = {}
    for i, ref in zip(plain, batch):
        reference[i] = ref
    suspects = [i for i in range(n) if reference.get(i) != ours[i]]
    log(f"{len(suspects)} captions differ from the batch output; re-running them alone ...")
    alone = jar_alone([captions[i] for i in suspects]) if suspects else []
    mismatches = []
    context = []
    for i, ref in zip(suspects, alone):
        if ref != ours[i]:
            mismatches.append((i, ref))
        elif i in reference:
            context.append((i, reference[i]))
    print()
    print(f"captions:                 {n}")
    print(f"differ from batch output: {len(suspects)} (of which {len(context)} only because the jar"
          f" read into the next caption, {len(suspects) - len(context) - len(mismatches)} with jar line breaks)")
    print(f"MISMATCHES (vs alone):    {len(mismatches)}")
    for i, ref in mismatches[: args.show]:
        print(f"  #{i} {captions[i]!r}\n     catcap: {ours[i]!r}\n     jar:    {ref!r}")
    if context and args.show:
        print("batch-context examples (catcap = jar alone):")
        for i, ref in context[: min(5, args.show)]:
            print(f"  #{i} {captions[i]!r}\n     catcap/alone: {ours[i]!r}\n     batch:        {ref!r}")
    print(f"speed, all captions: catcap {n / timing['ptb_tokenize']:,.0f} captions/s,"
          f" pycocoevalcap {len(plain) / t_jar:,.0f} captions/s"
          f" (x{(n / timing['ptb_tokenize']) / (len(plain) / t_jar):.1f})")
    eval_sizes(captions)
    return len(mismatches)


def eval_sizes(captions: Sequence[str], sizes: Sequence[int] = (5000, 25000)) -> None:
    """Time one tokenizer call of a typical evaluation size, catcap vs pycocoevalcap (JVM start included)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    for size in sizes:
        caps = list(captions[:size])
        grouped = {i: caps[i:i + 5] for i in range(0, len(caps), 5)}
        t0 = time.perf_counter()
        tokenize_captions(grouped)
        t1 = time.perf_counter()
        PTBTokenizer().tokenize({k: [{"caption": c} for c in v] for k, v in grouped.items()})
        t2 = time.perf_counter()
        print(f"one call on {size} captions: catcap tokenize_captions {t1 - t0:.3f} s,"
              f" pycocoevalcap PTBTokenizer.tokenize {t2 - t1:.3f} s (x{(t2 - t1) / (t1 - t0):.0f})")


# ---------------------------------------------------------------------------
# committed sample
# ---------------------------------------------------------------------------
_ODD = re.compile(r"[^a-z0-9 .,]")
SYNTHETIC = [
    "A man\u2019s dog isn\u2019t \u201chere\u201d \u2014 it\u2019s \u2018there\u2019\u2026",
    "\u00bd a pizza, \u00bc cup and 2\u00be miles \u2013 5 1/2 inches",
    "A caf\u00e9 na\u00efve r\u00e9sum\u00e9 with \u00fcber Stra\u00dfe signs",
    "A dog \U0001F436 on a couch \u2764\ufe0f with emoji",
    "Price: \u20ac5, \u00a33, \u00a510, \u00a22 and $4.99 (approx.)",
    "See http://www.example.com/a?b=1 or mail x@y.com [sic] {ok} <b>bold</b>",
    "Non\u00a0breaking\u2009thin\u3000ideographic spaces",
    "Line\rbreak and form\x0cfeed and \u2028separator",
    "Tab\tseparated\x00nul\x7fdel\u200bzero-width\ufeffbom",
    "He said \u201eyes\u201c and \u00abnon\u00bb \u2039ok\u203a \u201a\u201b",
    "Mr. Smith of Acme Co. lives on Main St. in the U.S. at 5 p.m.",
    "cannot gonna wanna 'tis 'twas rock'n'roll o'clock y'all",
    "&amp; &lt;tag&gt; &quot;q&quot; &nbsp; &mdash; &#39;",
    "A \u00d7 B \u00f7 C \u00b1 D \u00b0F \u2122 \u00a9 \u00ae \u00a7 \u00b6 \u2022 \u00b7",
    "\u4e00\u53ea\u732b \u0436\u0438\u0440\u0430\u0444 \u03b6\u03ce\u03bf \u05db\u05dc\u05d1 \u0643\u0644\u0628",
    "5'11\" tall, 3-4 dogs, 10:30am, 1,000,000 people, 3.14 pi",
    ":) :-( ;) :D ^_^ (-_-) <3 <<quoted>> --- ---- -----",
    "e-mail x-ray re-do well-known anti-war pro-choice U.S.-based",
    "...wait.... what?! no!!! yes?? ok. . . done",
    "\u0130stanbul \u0131 \u017fun K\u212a \u2160\u2161 \u24b6\u24b7 \u00b2\u00b3 \u2082",
]


def _shapes(caption: str) -> List[str]:
    """Local patterns around the odd characters of a caption (for sample diversity)."""
    low = caption.lower()

    def kind(ch: str) -> str:
        if ch.isalpha():
            return "a"
        if ch.isdigit():
            return "9"
        if ch == " ":
            return "_"
        return ch

    padded = "^^" + low + "$$"
    return [kind(padded[i - 2]) + kind(padded[i - 1]) + padded[i] + kind(padded[i + 1])
            + kind(padded[i + 2]) for i in range(2, len(padded) - 2) if _ODD.match(padded[i])]


_PIECES = (
    list("abcdefghijklmnopqrstuvwxyz") + ["The", "It", "A", "U.S.", "Mr.", "St.", "co.", "I.", "n't",
    "'s", "'ll", "cannot", "gonna", "&amp;", "&quot;", "http://x.org/a", "www.y.com", "x@y.com",
    "1/2", "5 1/2", "555-1234", "1,000", "3.14", ":)", ";-(", "^_^", "...", ". . .", "--", "---",
    "<b>", "</i>", "'90s", "o'clock", "x-ray", "U.S.-based", "photo.jpg", "#tag", "@user", "$5",
    "\u00bd", "\u2153", "\u201c", "\u201d", "\u2018", "\u2019", "\u201e", "\u00ab", "\u2014",
    "\u2013", "\u2026", "\u00e9", "\u00df", "\u00a0", "\u2009", "\u3000", "\u00ad", "\u200b",
    "\u20ac", "\u00a3", "\u00a2", "\u00a5", "\u00b0", "\u00d7", "\u2122", "\u2022", "\u4e2d",
    "\u0436", "\u03b1", "\u05d0", "\u0661", "\u00b2", "\u2082", "\u2044", "\u24b6", "\u017f",
    "\u0130", "\U0001F600", "\ue000", "\x01", "\x7f", "\r", "\u2028"]
    + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~0123456789")
)


def _random_strings(n: int, seed: int) -> List[str]:
    """Deterministic junk strings mixing the pieces above (synthetic part of the sample)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(_PIECES) + rng.choice(["", " ", " ", "  "]) for _ in range(rng.randint(1, 9))]
        out.append("".join(parts))
    return out


def make_sample(path: str, ordinary: int = 1000, odd_share: int = 5000, junk: int = 1500,
                seed: int = 0) -> None:
    """Write the committed parity sample (caption + jar output alone) as gzipped JSON lines."""
    captions = load_coco_captions()
    rng = random.Random(seed)
    seen_caption = set()
    seen_shape = set()
    chosen: List[str] = []
    odd = [c for c in captions if _ODD.search(c.lower()) or JAR_LINE_BREAKS.search(c)]
    log(f"{len(odd)} odd captions")
    for cap in odd:  # every new local pattern
        shapes = set(_shapes(cap)) - seen_shape
        if shapes and cap not in seen_caption:
            seen_shape |= shapes
            seen_caption.add(cap)
            chosen.append(cap)
    log(f"{len(chosen)} captions cover {len(seen_shape)} odd patterns")
    for cap in rng.sample(odd, min(len(odd), odd_share)):  # plus a random share of odd ones
        if cap not in seen_caption:
            seen_caption.add(cap)
            chosen.append(cap)
    plain = [c for c in captions if not _ODD.search(c.lower())]
    chosen.extend(c for c in rng.sample(plain, ordinary) if c not in seen_caption)
    rows = ([("coco", c) for c in chosen] + [("synthetic", c) for c in SYNTHETIC]
            + [("synthetic", c) for c in _random_strings(junk, seed)])
    log(f"running the jar on {len(rows)} captions, each alone ...")
    expected = jar_alone([c for _, c in rows])
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for (source, cap), exp in zip(rows, expected):
            f.write(json.dumps({"source": source, "caption": cap, "expected": exp},
                               ensure_ascii=False) + "\n")
    log(f"wrote {len(rows)} rows to {path} ({os.path.getsize(path) / 1024:.0f} KiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N captions")
    parser.add_argument("--show", type=int, default=20, help="mismatches to list")
    parser.add_argument("--make-sample", metavar="PATH", help="write the committed test sample")
    args = parser.parse_args()
    if args.make_sample:
        make_sample(args.make_sample)
        return 0
    return 1 if parity(args) else 0


if __name__ == "__main__":
    sys.exit(main())
