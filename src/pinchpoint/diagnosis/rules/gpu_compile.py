"""torch.compile read from a profiler trace (`analysis/gpu/compiled.py`): recompiles made while the
profiler recorded, and graph breaks in the steady steps. The same categories as a run's compile rules
(`rules/compile.py`), priced on the trace's own steps: what a trace holds is all they know (no guard
reasons, no cache state), and they say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.gpu.compiled import RECOMPILE_LIMIT
from pinchpoint.diagnosis.costs import graph_break_saving
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject
from pinchpoint.diagnosis.rules.compile import BREAKS_SHARE_MIN, RECOMPILES_MIN, SHARE_MIN


class TraceRecompiles(Rule):
    """Pattern: the trace holds recompilations (`dynamo_data: compile_id=X/Y` with Y > 0) that take a
    large part of its steps; a frame whose last recompile never ran has fallen back to eager.
    Why it's slow: each recompile traces and compiles the frame again; past the recompile limit the frame
    runs eagerly with one warning in the log.
    Fix: `TORCH_LOGS=recompiles` names the failing guard: a size → dynamic shapes (`dynamic=None`,
    `mark_dynamic`) or buckets; a value read by a graph break (the frame dynamo resumed in after a break
    is guarded on it) → remove the break.
    Reference: PyTorch's "Dealing with recompilations".
    Priced as `compile.recompiles` is on a run: the recompiles' time out of the profiled steps, one
    compilation like them in.
    """

    id: ClassVar[Category] = Category.COMPILE_RECOMPILES
    title: ClassVar[str] = "torch.compile recompiles while the profiler records"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        c = rank.compiled
        rec = c.recompiles
        if len(rec) < RECOMPILES_MIN or c.window_ns <= 0:
            return
        share = min(1.0, c.recompile_ns / c.window_ns)
        if share < SHARE_MIN:
            return
        mean = c.recompile_ns / len(rec)
        saved = max(0.0, c.recompile_ns - mean)
        gain = c.window_ns / max(1.0, c.window_ns - saved)
        frames = sorted({r.frame for r in rec})
        resumed = sorted(set(c.resumed) & set(frames))
        evidence = [
            Fact(
                "compile.trace.recompiles",
                recompiles=len(rec),
                frames=tuple(frames),
                ids=tuple(f"{r.frame}/{r.compile}" for r in rec[:12]),
                ns=c.recompile_ns,
                share=share,
                steps=len(c.steps_compiling),
            ),
            Fact("compile.trace.recompiles.priced", mean_ns=mean, saved_ns=saved),
        ]
        if resumed:
            evidence.append(Fact("compile.trace.resumed", frames=tuple(resumed)))
        for f in c.fell_back:
            evidence.append(
                Fact(
                    "compile.trace.fell_back",
                    frame=f.frame,
                    compile=f"{f.frame}/{f.compile}",
                    step=-1 if f.step is None else f.step,
                    limit=RECOMPILE_LIMIT,
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("compile.trace.recompiles.fix", resumed=tuple(resumed)),
            snippet=Fact("compile.trace.recompiles.snippet"),
            ranks=(rank.rank,),
            fix_kind=None if resumed == frames else FixKind.DYNAMIC_SHAPES,
        )


class TraceGraphBreaks(Rule):
    """Pattern: in the steps that compiled nothing, compiled regions run inside another frame's region: a
    graph break, resumed in a new frame, with the code at the break run eagerly between the graphs.
    Why it's slow: each graph is entered through dynamo's guards and AOTAutograd's wrappers, forward and
    backward, and nothing fuses across the break.
    Fix: change the breaking line (`TORCH_LOGS=graph_breaks` or `fullgraph=True` name it).
    Priced as `compile.graph_breaks` is on a run: the step's time around its graphs shrinks with the graph
    calls to one forward (and one backward) per step. On a trace with GPU work, host time counts only
    where the GPU waited: the share is capped at the GPU's idle share of the steps.
    """

    id: ClassVar[Category] = Category.COMPILE_GRAPH_BREAKS
    title: ClassVar[str] = "torch.compile's graphs break into pieces"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        g = rank.compiled.steady
        if g is None or g.breaks < 1 or g.step_ns <= 0:
            return
        whole = 2 if rank.compiled.backward else 1
        if g.calls <= whole:
            return
        saved = graph_break_saving(g.around_ns, g.calls, whole)
        share = min(1.0, saved / g.step_ns)
        if rank.breakdown is not None and rank.split is not None:
            share = min(share, rank.split.fractions["gpu_idle"] + rank.split.fractions["data_wait"])
            saved = share * g.step_ns
        if share < BREAKS_SHARE_MIN:
            return
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=g.step_ns / max(1.0, g.step_ns - saved),
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact(
                    "compile.trace.breaks",
                    breaks=g.breaks,
                    calls=g.calls,
                    steps=g.steps,
                    inside_ns=g.inside_ns,
                    around_ns=g.around_ns,
                    step_ns=g.step_ns,
                ),
                Fact("compile.graph_breaks.priced", whole=whole, saved_ns=saved),
            ),
            fix=Fact("compile.trace.breaks.fix"),
            ranks=(rank.rank,),
            fix_kind=FixKind.GRAPH_BREAKS,
        )
