"""Paired bootstrap comparison of two captioning systems on the same images.

For R resamples, draw I images with replacement (the same draw for both systems), compute
each metric's corpus score for both systems on the draw and keep the difference B - A.
Reported per metric: the observed difference, the 95% percentile interval of the resampled
differences, and a two-sided p-value ``min(1, 2 * min(P(d* <= 0), P(d* >= 0)))`` with the
``(count + 1) / (R + 1)`` correction (so p is never exactly 0).

Corpus BLEU is recomputed exactly on every resample from per-image sufficient statistics.
ROUGE-L, CIDEr(-D) and SPICE are means of per-image scores, so their resampled corpus
score is exact too (CIDEr-D's df stays that of the full reference set, as in the toolkit).
METEOR's corpus score is Meteor's own aggregate, which cannot be rebuilt from per-image
scores without Java; its resamples use the mean of per-image METEOR (flagged in the output).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from catcap.metrics.bleu import bleu_from_stats
from catcap.metrics.errors import MetricInputError
from catcap.metrics.evaluate import Evaluation

CHUNK = 64  # resamples evaluated at once


@dataclass(frozen=True)
class Comparison:
    """One metric's paired comparison: scores a, b, difference b - a, its 95% CI and p."""

    metric: str
    a: float
    b: float
    diff: float
    low: float
    high: float
    p_value: float
    approximate: bool = False


def _resampled(ev: Evaluation, name: str, idx: np.ndarray) -> np.ndarray:
    """(R,) corpus score of metric ``name`` on each resample of image indices idx (R, I)."""
    if name.startswith("Bleu_") and ev.bleu_stats is not None:
        k = int(name.split("_")[1]) - 1
        return bleu_from_stats(ev.bleu_stats[idx].sum(axis=1))[:, k]
    return ev.per_image[name][idx].mean(axis=1)


def paired_bootstrap(a: Evaluation, b: Evaluation, resamples: int = 1000, seed: int = 0) -> list[Comparison]:
    """Compare two evaluations of the same images, metric by metric (see module docstring)."""
    if list(a.image_ids) != list(b.image_ids):
        only_a = set(a.image_ids) - set(b.image_ids)
        only_b = set(b.image_ids) - set(a.image_ids)
        raise MetricInputError(
            "a paired comparison needs captions for the same images from both systems; "
            f"{len(only_a)} image(s) only in A, {len(only_b)} only in B "
            "(or the same images in another order: align both result lists first)"
        )
    if resamples < 1:
        raise MetricInputError(f"resamples must be >= 1, got {resamples}")
    names = [n for n in a.corpus if n in b.corpus]
    rng = np.random.default_rng(seed)
    count = len(a.image_ids)
    diffs = {n: [] for n in names}
    for lo in range(0, resamples, CHUNK):
        idx = rng.integers(0, count, size=(min(CHUNK, resamples - lo), count))
        for n in names:
            diffs[n].append(_resampled(b, n, idx) - _resampled(a, n, idx))
    out = []
    for n in names:
        d = np.concatenate(diffs[n])
        below = (np.sum(d <= 0) + 1) / (len(d) + 1)
        above = (np.sum(d >= 0) + 1) / (len(d) + 1)
        low, high = np.percentile(d, [2.5, 97.5])
        out.append(Comparison(n, a.corpus[n], b.corpus[n], b.corpus[n] - a.corpus[n], float(low), float(high),
                              float(min(1.0, 2 * min(below, above))), approximate=(n == "METEOR")))
    return out


def format_comparison(rows: list[Comparison], label_a: str = "A", label_b: str = "B") -> str:
    """A table of the comparison, one metric per line."""
    lines = [f"{'metric':<12} {label_a[:10]:>10} {label_b[:10]:>10} {'B - A':>9}  {'95% CI':>21}  {'p':>7}"]
    for r in rows:
        flag = " *" if r.approximate else ""
        lines.append(f"{r.metric:<12} {r.a:>10.4f} {r.b:>10.4f} {r.diff:>+9.4f}  [{r.low:>+9.4f}, {r.high:>+9.4f}]  {r.p_value:>7.4f}{flag}")
    if any(r.approximate for r in rows):
        lines.append("* resampled as the mean of per-image scores (Meteor's corpus aggregate needs Java per resample)")
    return "\n".join(lines)
