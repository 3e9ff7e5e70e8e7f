"""Python's garbage collector: explicit `gc.collect()` calls and full collections over a large heap."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.stacks import is_library_file
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, speedup_removing

GC_SHARE_MIN = 0.05
"""Collections above 5% of the steps' time (the floor of the other host rules)."""
SHARE_MAX = 0.99
"""Explicit calls are removed whole (their time is measured call by call): up to x100, not the x20 that
other shares stop at (a planted epoch-end collect measured x42 bare)."""
EXPLICIT_MOST = 0.5
"""Explicit calls hold at least half the collector's time: they are the fix."""


class HostGc(Rule):
    """Pattern: Python's garbage collector takes a share of the steps: explicit `gc.collect()` calls (a
    library's epoch end), or automatic full collections over a heap of long-lived objects.
    Why it's slow: a full collection walks every tracked object; after start-up that can be millions,
    and the step waits (a stall every N steps, between fast ones).
    Fix: drop or space out the explicit calls; `gc.freeze()` once after start-up so collections skip
    what start-up made; raise the first generation's threshold (`gc.set_threshold`) for allocation-heavy
    loops.
    Reference: Python docs, gc.freeze and gc.callbacks; Instagram's "Dismissing Python garbage collection".
    """

    id: ClassVar[Category] = Category.HOST_GC
    title: ClassVar[str] = "Python's garbage collector stalls the steps"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})
    # (no collector counts, from other profilers' files or older run directories: nothing to judge,
    # and no note: the collector is judged only where pinchpoint ran the program)

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        gc = rank.gc
        if gc is None or gc.share < GC_SHARE_MIN:
            return
        evidence = [
            Fact(
                "host.gc.time",
                share=gc.share,
                per_step_ns=gc.ns_per_step,
                collections=gc.collections_per_step,
                full=gc.full_per_step,
            )
        ]
        if gc.stall_steps:
            evidence.append(
                Fact(
                    "host.gc.stalls",
                    steps=gc.stall_steps,
                    of=gc.steps,
                    every=gc.stall_every,
                    stall_ns=gc.stall_ns,
                    median_ns=gc.median_step_ns,
                )
            )
        explicit = gc.explicit_share >= EXPLICIT_MOST * gc.share and bool(gc.sites)
        for site in gc.sites[:3]:
            evidence.append(
                Fact(
                    "host.gc.site",
                    file=site.file,
                    line=site.line,
                    function=site.function,
                    calls=site.calls,
                    ns=site.ns,
                    own=_own_code(site.file, gc.cwd),
                )
            )
        if gc.frozen:
            evidence.append(Fact("host.gc.frozen", objects=gc.frozen))
        share = gc.explicit_share if explicit else gc.share
        top = gc.sites[0] if explicit else None
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=1.0 / (1.0 - min(share, SHARE_MAX)) if explicit else speedup_removing(share),
            basis=Basis.REMOVED,
            confidence=Confidence.HIGH if explicit else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact(
                "host.gc.fix_explicit",
                file=os.path.basename(top.file),
                line=top.line,
                function=top.function,
                own=_own_code(top.file, gc.cwd),
            )
            if top is not None
            else Fact("host.gc.fix_automatic", frozen=gc.frozen),
            snippet=Fact("host.gc.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.GC_LESS,
            fix_params=(("line", top.line),) if top is not None else (),
        )


def _own_code(path: str, cwd: str | None) -> bool:
    """The program's own file: not a library's (`stacks.is_library_file`), under its working directory."""
    if is_library_file(path):
        return False
    return cwd is None or os.path.abspath(path).startswith(os.path.abspath(cwd) + os.sep)
