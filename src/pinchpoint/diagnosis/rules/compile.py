"""torch.compile's findings: `compile.recompiles` (compiling again for every new size of a dimension that
varies), `compile.graph_breaks` (a compiled model broken into many graphs with Python between them) and
`compile.time` (a run that compiles from scratch what a cache would have loaded).

A frame compiled with static shapes (`dynamic=False`, or a size dynamo specialised on) is guarded on
each input's sizes; a new size fails the guard and compiles again, until
`torch._dynamo.config.recompile_limit` (8) is hit and the frame runs eagerly on sizes it has not seen.
Priced on the run's loop: the recompiles' time out, one more compilation (a dynamic graph) in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.compiles import CompileStats, ValueGuard
from pinchpoint.analysis.run_time import COMPILING
from pinchpoint.diagnosis.costs import graph_break_saving
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject
from pinchpoint.diagnosis.whole_run import program_ns

SHARE_MIN = 0.10
"""Recompiles holding at least 10% of the run's loop."""
SIZE = "size"
"""In a guard failure about a tensor's sizes ("size mismatch at index 1"): what dynamic shapes fix."""
VALUE_TITLE = "torch.compile recompiles for each value a graph break reads"
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
        if c.value_guard is not None:
            yield from self._value_guard(rank.rank, c, c.value_guard, program_ns(whole))
            return
        if not c.varying and not any(SIZE in r for r in c.reasons):
            return  # (other guards: a first call without gradients, a value a graph break specialised)
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


    def _value_guard(self, rank: int, c: CompileStats, vg: ValueGuard, loop: float) -> Iterable[Finding]:
        """A frame resumed after a graph break, recompiled for each value read at the break: the break
        is the fix (no dynamic shapes), and all of that frame's compilations go with it."""
        share = min(1.0, vg.compile_ns / loop)
        if share < SHARE_MIN:
            return
        gain = loop / max(1.0, loop - vg.compile_ns)
        evidence = [
            Fact(
                "compile.recompiles.value",
                frame=vg.frame,
                site=vg.site or "?",
                recompiles=vg.recompiles,
                ns=vg.compile_ns,
                share=share,
            ),
            Fact("compile.recompiles.reason", reason=c.reasons[0] if c.reasons else "?"),
            Fact("compile.recompiles.value_priced", saved_ns=float(vg.compile_ns)),
        ]
        if c.limit_hit:
            evidence.append(Fact("compile.recompiles.value_limit", limit=c.recompile_limit or 0))
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=VALUE_TITLE),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.HIGH,
            evidence=tuple(evidence),
            fix=Fact("compile.recompiles.value_fix", site=vg.site or "?"),
            snippet=Fact("compile.recompiles.value_snippet"),
            ranks=(rank,),
            of_run=True,
            run_speedup=gain,
        )


BREAKS_SHARE_MIN = 0.05
"""Graph breaks pricing at least 5% of the step."""
ITEM = "Tensor.item()"
"""In dynamo's reason where a `.item()` broke the graph: `capture_scalar_outputs` lets dynamo trace it."""


class GraphBreaks(Rule):
    """Pattern: a compiled model runs as many graphs a step, not one forward and one backward: dynamo broke
    it where it could not trace (a `.item()`, a `print`, data-dependent control flow, an unsupported
    call), resumed after the break in a new frame, and ran the code at the break eagerly.
    Why it's slow: each graph is entered through dynamo's guards and AOTAutograd's and autograd's
    wrappers, forward and backward, and nothing fuses across a break: on a small model this overhead
    is most of the step.
    Fix: change the breaking line (keep the value on the tensor: `torch.where` for a branch, no
    `.item()`; log outside the compiled function), or let dynamo trace it
    (`torch._dynamo.config.capture_scalar_outputs = True` for `.item()`); `fullgraph=True` lists what
    still breaks.
    Reference: PyTorch's torch.compile troubleshooting ("graph breaks"), `TORCH_LOGS=graph_breaks`.
    Priced: the time around the graphs (the step outside its graphs, update and input waits) shrinks
    with the graph calls to one forward and one backward per compiled frame; fusion across the breaks
    is not priced (a lower bound).
    """

    id: ClassVar[Category] = Category.COMPILE_GRAPH_BREAKS
    title: ClassVar[str] = "torch.compile's graphs break into many pieces"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        c = rank.compiles
        if c is None or not c.breaks or c.graphs is None:
            return
        g = c.graphs
        whole = 2 * (c.whole_frames + 1)  # one forward and one backward graph per frame; the broken one whole
        if g.calls <= whole or g.step_ns <= 0:
            return
        saved = graph_break_saving(g.around_ns, g.calls, whole)
        share = min(1.0, saved / g.step_ns)
        if share < BREAKS_SHARE_MIN:
            return
        item = any(b.reason and ITEM in b.reason for b in c.breaks)
        first = c.breaks[0]
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=g.step_ns / max(1.0, g.step_ns - saved),
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact(
                    "compile.graph_breaks.sites",
                    sites=tuple(f"{b.function} at {b.site}" for b in c.breaks[:5]),
                    reason=first.reason or "?",
                ),
                Fact(
                    "compile.graph_breaks.graphs",
                    calls=g.calls,
                    inside_ns=g.inside_ns,
                    around_ns=g.around_ns,
                    step_ns=g.step_ns,
                ),
                Fact("compile.graph_breaks.priced", whole=whole, saved_ns=saved),
            ),
            fix=Fact("compile.graph_breaks.fix", site=first.site, item=item),
            snippet=Fact("compile.graph_breaks.snippet", item=item),
            ranks=(rank.rank,),
            fix_kind=FixKind.GRAPH_BREAKS,
            fix_params=(("item", 1),) if item else (),
        )


TIME_SHARE_MIN = 0.10
"""What a warm cache would save: at least 10% of the run's wall clock."""
HIT_KEEPS = 0.1
"""Of a cold compilation's backend time, what a cache hit still costs (loading the compiled code).
Measured: see decision 112."""


class CompileTime(Rule):
    """Pattern: a short compiled run spends most of its wall clock compiling, every run, because the
    compiler's caches never hit: they live in a directory that does not outlive the run (inductor's
    default is under /tmp: a container, a CI job or a cluster node starts without it).
    Why it's slow: each run traces the model (dynamo), derives the backward (AOTAutograd) and generates
    and compiles C++ or Triton (inductor) again; a run that finds its graphs in the cache loads them.
    Fix: `TORCHINDUCTOR_CACHE_DIR` on storage that outlives the run (a persistent volume, a shared
    filesystem), or the mega-cache (`torch.compiler.save_cache_artifacts()` after a run,
    `load_cache_artifacts()` before the next). Dynamo's tracing is paid either way.
    Reference: PyTorch's "Compile time caching in torch.compile" tutorial.
    Priced: the cold compilations' backend time, less what loading it costs (`HIT_KEEPS`), out of the
    run's wall clock. Caches turned off (`TORCHINDUCTOR_FORCE_DISABLE_CACHES`) are the program's choice:
    not found.
    """

    id: ClassVar[Category] = Category.COMPILE_TIME
    title: ClassVar[str] = "Every run compiles from scratch what a cache would load"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        c, whole = rank.compiles, rank.run_time
        if c is None or c.cold is None or whole is None or whole.wall_ns <= 0:
            return
        saved = c.cold.backend_ns * (1 - HIT_KEEPS)
        share = saved / whole.wall_ns
        if share < TIME_SHARE_MIN:
            return
        gain = whole.wall_ns / max(1.0, whole.wall_ns - saved)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=gain,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact(
                    "compile.time.run",
                    compiling_ns=whole.segment_ns(COMPILING),
                    wall_ns=whole.wall_ns,
                    compiles=c.compiles,
                    backend_ns=c.cold.backend_ns,
                ),
                Fact("compile.time.cache", misses=c.cold.misses, hits=c.cold.hits, directory=c.cold.directory or "?"),
                Fact("compile.time.priced", keeps=HIT_KEEPS, saved_ns=saved),
            ),
            fix=Fact("compile.time.fix", directory=c.cold.directory or "?"),
            snippet=Fact("compile.time.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.COMPILE_CACHE,
            of_run=True,
            run_speedup=gain,
        )
