"""The COCO caption evaluation, same numbers as pycocoevalcap 1.2's ``COCOEvalCap``.

``evaluate_captions(results, references)`` tokenises every caption with the PTB-compatible
tokenizer, then computes the requested metrics on the images of ``results``. Scores are
reported under the toolkit's names; note that the toolkit's "CIDEr" *is* CIDEr-D (sigma 6
length penalty, clipping, x10, df from the evaluated references). The original CIDEr is
available as ``cider-plain`` ("CIDEr_plain"). METEOR and SPICE need Java (SPICE also the
Stanford CoreNLP 3.6.0 jars); when they cannot run they are listed in ``unavailable`` with
the reason and every other metric is still computed.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from catcap.metrics.bleu import bleu
from catcap.metrics.cider import cider, cider_d
from catcap.metrics.errors import MetricInputError, MetricUnavailable
from catcap.metrics.files import ImageId, match_results
from catcap.metrics.ngrams import count_caption_set
from catcap.metrics.rouge import rouge_l
from catcap.metrics.tokenizer import ptb_tokenize

NAMES = {
    "bleu": ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"],
    "meteor": ["METEOR"],
    "rouge": ["ROUGE_L"],
    "cider": ["CIDEr"],
    "cider-plain": ["CIDEr_plain"],
    "spice": ["SPICE"],
}
DEFAULT_METRICS = ("bleu", "meteor", "rouge", "cider", "spice")
JAVA_FREE_METRICS = ("bleu", "rouge", "cider")


@dataclass
class Evaluation:
    """Scores of one system on a set of images.

    image_ids: the I images, in the order of ``per_image`` arrays.
    corpus: {toolkit name: corpus score}.
    per_image: {toolkit name: (I,) scores}.
    unavailable: {metric: reason} for metrics that could not run here.
    bleu_stats: (I, 10) BLEU sufficient statistics (for exact bootstrap of corpus BLEU).
    empty: image ids whose candidate is empty after tokenisation.
    """

    image_ids: list
    corpus: dict[str, float] = field(default_factory=dict)
    per_image: dict[str, np.ndarray] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    bleu_stats: np.ndarray | None = None
    empty: list = field(default_factory=list)

    def to_json(self) -> dict:
        """Corpus scores under the toolkit's names plus one row of scores per image."""
        rows = []
        for i, image_id in enumerate(self.image_ids):
            row = {"image_id": image_id}
            row.update({name: float(scores[i]) for name, scores in self.per_image.items()})
            rows.append(row)
        return {"corpus": dict(self.corpus), "unavailable": dict(self.unavailable), "per_image": rows}


def parse_metrics(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """'bleu,rouge' or a sequence -> validated metric keys (None = the toolkit's five)."""
    if spec is None:
        return DEFAULT_METRICS
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    keys = tuple(m.strip().lower() for m in items if m.strip())
    unknown = [m for m in keys if m not in NAMES]
    if unknown or not keys:
        raise MetricInputError(f"unknown metric(s) {unknown or spec!r}; choose from {', '.join(NAMES)}")
    return keys


def evaluate_captions(
    results: Mapping[ImageId, str],
    references: Mapping[ImageId, Sequence[str]],
    metrics: str | Sequence[str] | None = None,
    *,
    corenlp_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Tokenise raw captions and score them (see the module docstring).

    results: {image_id: caption}; references: {image_id: [captions]} containing every
    image of ``results`` (extra reference images are ignored, as in the toolkit).
    """
    keys = parse_metrics(metrics)
    ids = match_results(results, references)
    log = log or (lambda msg: None)
    start = time.perf_counter()
    cands = [ptb_tokenize(results[i]) for i in ids]
    refs = [[ptb_tokenize(r) for r in references[i]] for i in ids]
    _check_words(ids, refs, references)
    log(f"tokenised {len(cands) + sum(map(len, refs))} captions in {time.perf_counter() - start:.2f}s")
    return evaluate_tokenized(ids, cands, refs, keys, corenlp_dir=corenlp_dir, log=log)


def _check_words(ids: list, refs: list[list[list[str]]], references: Mapping[ImageId, Sequence[str]]) -> None:
    """A reference without a word (empty, or punctuation only) is refused, as ``catcap prepare``
    and ``train`` refuse it in a dataset: the same file is good or bad for every command."""
    empty = [(i, j) for i, rs in zip(ids, refs) for j, r in enumerate(rs) if not r]
    if empty:
        i, j = empty[0]
        raise MetricInputError(f"{len(empty)} reference caption(s) have no word after PTB tokenisation, e.g. "
                               f"caption {j} of image {i!r} ({references[i][j]!r}); expected every reference caption "
                               "to have a word: fix or remove them in the reference file")


def evaluate_tokenized(
    ids: list,
    cands: Sequence[Sequence[str]],
    refs: Sequence[Sequence[Sequence[str]]],
    metrics: Sequence[str] = DEFAULT_METRICS,
    *,
    corenlp_dir: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Evaluation:
    """Score already tokenised captions: ``cands[i]`` against ``refs[i]`` for image ``ids[i]``."""
    log = log or (lambda msg: None)
    ev = Evaluation(list(ids), empty=[i for i, c in zip(ids, cands) if not c])
    cs = count_caption_set(cands, refs)
    for key in metrics:
        start = time.perf_counter()
        if key in ("meteor", "spice"):
            log(f"computing {NAMES[key][0]} with Java (the JVM and its resources take a few seconds to load)")
        try:
            _run_metric(key, ev, cs, cands, refs, corenlp_dir)
        except MetricUnavailable as err:
            ev.unavailable[key] = err.reason
            log(f"{NAMES[key][0]}: unavailable ({err.reason})")
            continue
        log(f"{'/'.join(NAMES[key])} computed in {time.perf_counter() - start:.2f}s")
    return ev


def _run_metric(key, ev: Evaluation, cs, cands, refs, corenlp_dir) -> None:
    if key == "bleu":
        result = bleu(cs)
        ev.bleu_stats = result.stats
        for k, name in enumerate(NAMES["bleu"]):
            ev.corpus[name] = result.corpus[k]
            ev.per_image[name] = result.per_image[:, k]
        return
    if key in ("rouge", "cider", "cider-plain"):
        fn = {"rouge": rouge_l, "cider": cider_d, "cider-plain": cider}[key]
        corpus, per_image = fn(cs)
    else:
        corpus, per_image = _java_metric(key, ev.image_ids, cands, refs, corenlp_dir)
    ev.corpus[NAMES[key][0]] = corpus
    ev.per_image[NAMES[key][0]] = np.asarray(per_image, dtype=np.float64)


def _java_metric(key, ids, cands, refs, corenlp_dir) -> tuple[float, np.ndarray]:
    """METEOR / SPICE through the official jars, on space-joined tokens like the toolkit."""
    keys = list(range(len(ids)))  # positional keys: image ids of any type are safe
    gts = {k: [" ".join(r) for r in refs[k]] for k in keys}
    res = {k: " ".join(cands[k]) for k in keys}
    if key == "meteor":
        from catcap.metrics.meteor import meteor_score

        corpus, per = meteor_score(gts, res)
        return corpus, np.array([per[k] for k in keys])
    from catcap.metrics.spice import spice_score

    corpus, per = spice_score(gts, res, corenlp_dir=corenlp_dir)
    return corpus, np.array([per[k]["All"]["f"] for k in keys])


def print_table(ev: Evaluation, file=sys.stdout) -> None:
    """A two-column table of corpus scores, unavailable metrics with their reason."""
    print(f"{'metric':<12} {'score':>8}   ({len(ev.image_ids)} images)", file=file)
    for name, value in ev.corpus.items():
        print(f"{name:<12} {value:>8.4f}", file=file)
    for key, reason in ev.unavailable.items():
        short = reason if len(reason) <= 100 else reason[:97] + "..."
        print(f"{NAMES[key][0]:<12} {'n/a':>8}   unavailable: {short}", file=file)
    if ev.empty:
        print(f"note: {len(ev.empty)} candidate(s) are empty after tokenisation and score 0", file=file)
