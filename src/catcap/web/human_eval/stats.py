"""The statistics of ``catcap human-eval export``: Fleiss' kappa and the exact sign test.

Both are small and exact (no scipy): the sign test sums binomial probabilities with
integers, kappa is the textbook formula.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Sequence


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa of a table ``counts[i][j]`` = how many raters put item i in category j.

    Fleiss (1971): P_i = (sum_j n_ij^2 - n_i) / (n_i (n_i - 1)), P-bar = mean_i P_i,
    p_j = sum_i n_ij / sum_i n_i, P_e = sum_j p_j^2, kappa = (P-bar - P_e) / (1 - P_e).
    Items may have different numbers of ratings n_i (skipped ratings): p_j is then the share
    of all ratings, P_i each item's own agreement, which is Fleiss' formula when every n_i is
    the same. Items with fewer than 2 ratings carry no agreement and are left out. Returns None
    when kappa is undefined: no item with 2 ratings, or every rating in one category (P_e = 1).
    """
    rows = [list(map(int, r)) for r in counts if sum(r) >= 2]
    if any(x < 0 for r in rows for x in r):
        raise ValueError("counts must be non-negative")
    if not rows:
        return None
    p_bar = sum(Fraction(sum(x * x for x in r) - sum(r), sum(r) * (sum(r) - 1)) for r in rows) / len(rows)
    total = sum(sum(r) for r in rows)
    p_e = sum(Fraction(sum(r[j] for r in rows), total) ** 2 for j in range(len(rows[0])))
    if p_e == 1:
        return None
    return float((p_bar - p_e) / (1 - p_e))


def sign_test(wins_a: int, wins_b: int) -> float:
    """Two-sided exact sign test (binomial, p = 1/2) of wins_a against wins_b, ties already
    dropped: p = min(1, 2 * P(X <= min(wins_a, wins_b))) with X ~ Binomial(wins_a + wins_b, 1/2);
    1.0 when there are no wins at all."""
    if wins_a < 0 or wins_b < 0:
        raise ValueError(f"win counts must be non-negative, got {wins_a}, {wins_b}")
    n = wins_a + wins_b
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(wins_a, wins_b) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2 ** n)))
