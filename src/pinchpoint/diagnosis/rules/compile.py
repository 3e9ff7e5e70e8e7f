"""`compile.recompiles`: torch.compile compiling again for every new size of a dimension that varies.

A frame compiled with static shapes (`dynamic=False`, or a size dynamo specialised on) is guarded on
each input's sizes; a new size fails the guard and compiles again, until
`torch._dynamo.config.recompile_limit` (8) is hit and the frame runs eagerly on sizes it has not seen.
Priced on the run's loop: the recompiles' time out, one more compilation (a dynamic graph) in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject
from pinchpoint.diagnosis.whole_run import program_ns

SHARE_MIN = 0.10
"""Recompiles holding at least 10% of the run's loop."""
RECOMPILES_MIN = 2
"""A frame's one recompile is dynamo's way to dynamic shapes (with `dynamic=None`): two or more are not."""


class Recompiles(Rule):
    """Pattern: a compiled frame recompiles again and again, each time an input's size changes (batches
    of variable length, a last partial batch, sequence lengths).
    Why it's slow: each recompile traces and compiles the graph anew (seconds on a CPU); past the
    recompile limit the frame silently runs eagerly.
    Fix: let the dimension be dynamic (`torch.compile(..., dynamic=None)`, the default, compiles a
    dynamic graph at the second size; `dynamic=True`; `torch._dynamo.mark_dynamic(x, dim)`), or pad
    inputs to a few bucket sizes.
    Reference: PyTorch's "Dealing with recompilations" (torch.compiler docs), `TORCH_LOGS=recompiles`.
    """

    id: ClassVar[Category] = Category.COMPILE_RECOMPILES
    title: ClassVar[str] = "torch.compile recompiles for sizes that vary"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        c, whole = rank.compiles, rank.run_time
        if c is None or whole is None or c.recompiles < RECOMPILES_MIN:
            return
        loop = program_ns(whole)
        share = min(1.0, c.recompile_ns / loop)
        if share < SHARE_MIN:
            return
        saved = max(0.0, c.recompile_ns - c.mean_recompile_ns)  # (one dynamic compilation in their place)
        gain = loop / max(1.0, loop - saved)
        vary = c.varying[0] if c.varying else None
        evidence = [
            Fact(
                "compile.recompiles.count",
                recompiles=c.recompiles,
                compiles=c.compiles,
                ns=c.recompile_ns,
                share=share,
                frame=c.frame or "?",
            ),
            Fact("compile.recompiles.varying", tensor=vary.tensor, dim=vary.dim, sizes=vary.sizes)
            if vary is not None
            else Fact("compile.recompiles.reason", reason=c.reasons[0] if c.reasons else "?"),
            Fact("compile.recompiles.priced", mean_ns=c.mean_recompile_ns, saved_ns=saved),
        ]
        if c.limit_hit:
            evidence.append(Fact("compile.recompiles.limit", limit=c.recompile_limit or 0))
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.HIGH if vary is not None else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact(
                "compile.recompiles.fix",
                tensor=vary.tensor if vary is not None else "",
                dim=vary.dim if vary is not None else -1,
            ),
            snippet=Fact("compile.recompiles.snippet", dim=vary.dim if vary is not None else 0),
            ranks=(rank.rank,),
            fix_kind=FixKind.DYNAMIC_SHAPES,
            of_run=True,
            run_speedup=gain,
        )
