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


def _block_medians(x: np.ndarray, rng: np.random.Generator, reps: int) -> np.ndarray:
    n = x.size
    block = max(1, round(n ** (1 / 3)))
    starts = rng.integers(0, n - block + 1, size=(reps, -(-n // block)))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(reps, -1)[:, :n]
    out: np.ndarray = np.median(x[idx], axis=1)
    return out


def ratio_test(before_ns: Sequence[int], after_ns: Sequence[int], *, seed: int = 0) -> RatioTest:
    a = np.asarray(before_ns, dtype=np.float64)
    b = np.asarray(after_ns, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        raise ValueError("both runs need measured steps")
    ratio = float(np.median(a) / np.median(b))
    if a.size < 3 or b.size < 3:
        return RatioTest(
            ratio=ratio, low=0.0, high=float("inf"), significant=False, n_before=a.size, n_after=b.size
        )
    rng = np.random.default_rng(seed)
    r = _block_medians(a, rng, RESAMPLES) / _block_medians(b, rng, RESAMPLES)
    tail = (1 - CONFIDENCE) / 2
    low, high = (float(q) for q in np.quantile(r, [tail, 1 - tail]))
    significant = (low > 1 or high < 1) and abs(ratio - 1) >= NOISE_FLOOR
    return RatioTest(
        ratio=ratio, low=low, high=high, significant=significant, n_before=int(a.size), n_after=int(b.size)
    )
