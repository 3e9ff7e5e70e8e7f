"""The shape of a rule, and the small helpers rules share for stating numbers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.stacks import StackScope
from pinchpoint.diagnosis.finding import Category, Finding
from pinchpoint.trace.run import Environment


class Rule(Protocol):
    """A rule reads one rank's analyses and yields findings.

    `requires` names the `RankAnalysis` fields it needs; when one is missing the engine skips the
    rule and says which data was missing instead of guessing.
    """

    id: ClassVar[Category]
    title: ClassVar[str]
    requires: ClassVar[frozenset[str]]

    def check(self, env: Environment, rank: RankAnalysis) -> Iterable[Finding]: ...


def ms(ns: float) -> str:
    v = ns / 1e6
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def pct(frac: float) -> str:
    return f"{100 * frac:.0f}%"


def speedup_removing(share: float) -> float:
    """Step-time ratio if a fraction `share` of the step disappeared (Amdahl)."""
    return 1.0 / max(1e-6, 1.0 - min(share, 0.95))


def stack_evidence(scope: StackScope | None, where: str) -> str | None:
    """One evidence line naming the hottest Python functions of a stack scope, or None without stacks."""
    if scope is None or not scope.top:
        return None
    amount = f"{scope.seconds:.1f} s" if scope.seconds is not None else f"{scope.samples} samples"
    parts = []
    for h in scope.top:
        inside = f", mostly inside {h.calls_into}" if h.calls_into else ""
        parts.append(f"{h.label} {pct(h.share)}{inside}")
    return f"Python stacks ({amount} of samples {where}): " + "; ".join(parts)
