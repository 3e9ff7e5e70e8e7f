"""Memory growth step over step: a least-squares line through the main process's RSS per step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pinchpoint.trace.run import Step


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryTrend:
    steps: int
    first_rss_bytes: int
    last_rss_bytes: int
    slope_bytes_per_step: float
    r2: float
    """Goodness of fit of the line: near 1 for steady growth, near 0 for noise."""

    @property
    def growth_bytes(self) -> int:
        return self.last_rss_bytes - self.first_rss_bytes


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """(slope, intercept, r²) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0:
        return 0.0, my, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, my - slope * mx, r2


def memory_trend(steps: Sequence[Step]) -> MemoryTrend | None:
    points = [(s.index, s.rss_bytes) for s in steps if s.rss_bytes is not None]
    if len(points) < 5:
        return None
    slope, _, r2 = fit_line([float(x) for x, _ in points], [float(y) for _, y in points])
    return MemoryTrend(
        steps=len(points),
        first_rss_bytes=points[0][1],
        last_rss_bytes=points[-1][1],
        slope_bytes_per_step=slope,
        r2=r2,
    )
