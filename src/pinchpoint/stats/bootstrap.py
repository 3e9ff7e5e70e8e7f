"""Is a change in step time real? A bootstrap interval on the ratio of median step times, and a floor
below which two runs of the same program on this kind of machine differ anyway.

Steps within one run are many and correlated (a slow minute makes many slow steps), so a test on the
steps alone calls a 1% difference between two runs of the same program "significant". What varies is
the run: `benchmarks/overhead.py`'s A/A arm (the same program run twice) spreads ±1.5–3% here. So a
change is significant only when the 99% interval of the ratio excludes 1 *and* the change is at least
NOISE_FLOOR. The bootstrap resamples blocks of consecutive steps (a moving-block bootstrap), which keeps
the correlation between neighbouring steps instead of pretending every step is independent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

NOISE_FLOOR = 0.03
"""Relative change in median step time that two runs of one unchanged program reach by themselves
(A/A between processes on the reference machine: ±1.5–3%)."""
CONFIDENCE = 0.99
RESAMPLES = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class RatioTest:
    ratio: float
    """median(A) / median(B): above 1, B is faster."""
    low: float
    high: float
    """The CONFIDENCE interval of `ratio`."""
    significant: bool
    """The interval excludes 1 and the change is at least NOISE_FLOOR."""
    n_before: int
    n_after: int
    statistic: str = "median"
    """What the ratio compares: the median step, or the mean where stalls hold much of the time."""


STALL_X = 3.0
STALLS_SHARE = 0.05
"""Steps over three times the median holding at least 5% of the time (over the median): stalls every
few steps (an epoch-end `gc.collect()`, a checkpoint), which a median passes over and a fix removes.
Then the ratio is of mean steps: a fix of the stalls measured ×1.05 by medians where the program's
own mean step measured ×3.9 (gc_epoch_collect, `pinchpoint try`)."""


def stalled(ns: Sequence[int]) -> bool:
    """Stalls hold at least `STALLS_SHARE` of these steps' time."""
    if len(ns) < 5:
        return False
    median = float(np.median(ns))
    extra = sum(x - median for x in ns if x > STALL_X * median)
    return extra >= STALLS_SHARE * max(1, sum(ns))


def _block_stat(x: np.ndarray, rng: np.random.Generator, reps: int, mean: bool) -> np.ndarray:
    n = x.size
    block = max(1, round(n ** (1 / 3)))
    starts = rng.integers(0, n - block + 1, size=(reps, -(-n // block)))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(reps, -1)[:, :n]
    out: np.ndarray = np.mean(x[idx], axis=1) if mean else np.median(x[idx], axis=1)
    return out


def ratio_test(before_ns: Sequence[int], after_ns: Sequence[int], *, seed: int = 0) -> RatioTest:
    """The ratio of median steps, or of mean steps where either side stalls (`stalled`)."""
    a = np.asarray(before_ns, dtype=np.float64)
    b = np.asarray(after_ns, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both runs need measured steps")
    mean = stalled(before_ns) or stalled(after_ns)
    statistic = "mean" if mean else "median"
    ratio = float(np.mean(a) / np.mean(b)) if mean else float(np.median(a) / np.median(b))
    if a.size < 3 or b.size < 3:
        return RatioTest(
            ratio=ratio, low=0.0, high=float("inf"), significant=False, n_before=a.size, n_after=b.size,
            statistic=statistic,
        )  # fmt: skip
    rng = np.random.default_rng(seed)
    r = _block_stat(a, rng, RESAMPLES, mean) / _block_stat(b, rng, RESAMPLES, mean)
    tail = (1 - CONFIDENCE) / 2
    low, high = (float(q) for q in np.quantile(r, [tail, 1 - tail]))
    significant = (low > 1 or high < 1) and abs(ratio - 1) >= NOISE_FLOOR
    return RatioTest(
        ratio=ratio, low=low, high=high, significant=significant, n_before=int(a.size), n_after=int(b.size),
        statistic=statistic,
    )  # fmt: skip
