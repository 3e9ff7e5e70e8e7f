"""Are a trial's few steps faster than the steps around it? Rank and permutation tests, exact where
the samples are small.

A trial runs 3-5 steps; the steps around it vary by ±10% on a shared machine, so the ratio of medians
alone calls noise a gain. The exact distribution of the rank statistic is counted for the small samples
trials have; no assumption about the shape of step times (decision 48).
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterable, Sequence
from functools import cache

TRIAL_P_MAX = 0.01
"""A trial's steps count as faster below this: 0.05 let a five-step dip of this VM (steps drift by
×1.6 over seconds here) pass as two workers paying ×1.31 where a whole run with them measured ×0.92."""
MAX_BEFORE = 40
"""The latest steps before the trial that are compared (the counting grows with both samples)."""


def faster_p(trial: Sequence[int], before: Sequence[int]) -> float:
    """P(a rank statistic this small or smaller) if the trial steps were drawn like the ones before:
    small when the trial's steps are shorter. Ties count half."""
    before = list(before)[-MAX_BEFORE:]
    m, n = len(trial), len(before)
    if m == 0 or n == 0:
        return 1.0
    # U: pairs where a trial step is longer than a step before it (ties half), doubled to stay integral.
    u2 = sum(2 if t > b else 1 if t == b else 0 for t in trial for b in before)
    total = _ways(m, n, m * n)
    return _ways(m, n, u2 // 2) / total


@cache
def _ways(m: int, n: int, u: int) -> int:
    """Orderings of m trial and n other steps with at most u (trial > other) pairs."""
    if u < 0:
        return 0
    if m == 0 or n == 0:
        return 1
    # The largest of all m + n steps is a trial step (it beats all n others) or one of the others.
    return _ways(m - 1, n, u - n) + _ways(m, n - 1, u)


PERMUTATIONS_MAX = 20_000
"""Splits an exact permutation test enumerates; beyond, this many random splits (seeded: the same
steps give the same p)."""


def mean_faster_p(trial: Sequence[int], reference: Sequence[int]) -> float:
    """P(a mean this small or smaller) if the trial's steps were any of the pooled steps: the
    permutation test of the difference of means, one-sided (small when the trial is faster). For
    steps whose typical time is a mean (`typical_ns`), where a rank test sees two modes as a tie."""
    m, ref = len(trial), list(reference)
    if m == 0 or not ref:
        return 1.0
    pooled = [*trial, *ref]
    observed = sum(trial)
    if math.comb(len(pooled), m) <= PERMUTATIONS_MAX:
        splits: Iterable[Sequence[int]] = itertools.combinations(pooled, m)
    else:
        rng = random.Random(len(pooled) * 1_000_003 + observed)
        splits = (rng.sample(pooled, m) for _ in range(PERMUTATIONS_MAX))
    hits = total = 0
    for split in splits:
        total += 1
        hits += sum(split) <= observed
    return hits / total


def slower_p(these: Sequence[int], others: Sequence[int]) -> float:
    """One-sided Mann-Whitney test, normal approximation (runs have hundreds of steps; `faster_p`'s exact
    count is for a trial's few): the chance of `these` ranking this high among `others` if
    they were drawn alike. Ties count half."""
    m, n = len(these), len(others)
    if m == 0 or n == 0:
        return 1.0
    ranked = sorted(others)
    u = 0.0
    for t in these:
        lo, hi = bisect.bisect_left(ranked, t), bisect.bisect_right(ranked, t)
        u += lo + (hi - lo) / 2
    z = (u - m * n / 2) / math.sqrt(m * n * (m + n + 1) / 12)
    return 0.5 * math.erfc(z / math.sqrt(2))
