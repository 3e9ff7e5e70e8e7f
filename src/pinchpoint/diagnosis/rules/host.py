"""Host-bound steps: Python work in the loop, and per-op framework overhead."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.ops import VECTOR_ROWS, OpStats
from pinchpoint.analysis.stacks import StackScope
from pinchpoint.analysis.steps import COMPUTE_PHASES, StepStats
from pinchpoint.diagnosis.costs import batched_requests
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, speedup_removing, stack_evidence
from pinchpoint.trace.run import HOST_OTHER, Phase

HOST_SHARE_MIN = 0.05
"""Untraced host time above 5% of the step. TF/XProf grade "all others" ≥ 3% moderate, ≥ 15% high
(rules-catalog §1b); we start at 5% because zero_grad and loop bookkeeping always cost a little."""
HOST_SHARE_HIGH = 0.15
DISPATCH_SHARE_MIN = 0.10
"""Per-op overhead above 10% of the step (between TF's moderate 3% and high 15% kernel-launch grades,
rules-catalog §1b; our estimate is coarser than a launch count, so we start higher)."""
MANY_SMALL_OPS = 16
"""At least 16 small ops per step before overhead is worth naming. The share decides: a healthy small
model has ~100-130 small ops a step, all but free beside its large ones (share 0.00 on healthy.py); a
batch-1 inference loop of 12 tiny blocks has 37, and they are the whole step."""
DISPATCH_RECOVERABLE = 0.85
"""Fraction of the measured overhead a batched or compiled version removes: the math itself remains.
Calibrated on examples/host_dispatch.py (fix removed 71% of a step whose overhead measured 84%)."""
OVERHEAD_PER_OP_MAX = 10.0
"""Per-op overhead is at most this many times the measured cost of issuing one op (the dispatch probe)
per op of the step: Python, dispatcher and autograd around each op. Planted programs read 6.0x
(host_dispatch.py) and 5.1x (serving_batch1.py); healthy.py, with nothing planted, read 19.9x (7.8 ms
over 283 ops at 1.4 µs, on the avx512_bf16 EPYC): time outside large ops that is not per-op overhead
(small ops' own work, the autograd engine's), which no batching or compiling removes."""
OPTIMIZER_OVERHEAD = 0.5
"""The optimizer step holds at least half the per-op overhead: its fused form is the fix."""
OPTIMIZER_MENTION = 0.25
"""... at least a quarter: the fused form is named beside the general fix, with its own estimate
(a 40-block 64-wide MLP under AdamW: 37% of the overhead, est. ×1.39, fused=True measured ×1.46)."""
SERVING_BATCH = 32
"""Requests per forward call the fix for a batch-1 inference loop assumes (and its snippet shows)."""
VECTOR_MENTION = 0.05
"""Matrix-vector products worth naming in the evidence: 5% of the step."""


class HostPython(Rule):
    """Pattern: step time that no framework phase covers (outside forward, backward, optimizer, data).
    Why it's slow: Python runs one thing at a time; metrics via .tolist() loops, per-sample bookkeeping
    and logging every step hold the next step back.
    Fix: compute metrics on tensors, accumulate and log every N steps, move bookkeeping out of the loop.
    Reference: rules-catalog §1b (TF "all others" ≥ 3%/15%), §14 rule 2.
    """

    id: ClassVar[Category] = Category.HOST_PYTHON
    title: ClassVar[str] = "Python work in the training loop, outside framework ops"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        steps = rank.steps
        if steps is None:
            return
        other_share = steps.share(HOST_OTHER)
        evidence: list[Fact] = [
            Fact("host.python.outside", share=other_share, outside_ns=steps.phase_ns.get(HOST_OTHER, 0.0))
        ]
        loose_share = 0.0
        if rank.ops is not None and rank.ops.window_step_ns > 0:
            loose_share = min(other_share, rank.ops.loose_op_ns_per_step / rank.ops.window_step_ns)
            if loose_share >= 0.01:
                evidence.append(Fact("host.python.loose_ops", share=loose_share))
        share = other_share - loose_share
        if rank.serving is not None:  # a server between requests sleeps in its event loop: idle, not slow
            idle = _waiting_outside(steps) / max(1.0, steps.host_mean_ns)
            if idle >= 0.01:
                evidence.append(Fact("host.python.idle_server", share=min(share, idle)))
                share -= min(share, idle)
        collected = min(share, rank.gc.share) if rank.gc is not None else 0.0
        if collected >= 0.01:  # Python's collector is host.gc's (its pauses sit outside every phase)
            evidence.append(Fact("host.python.gc", share=collected))
            share -= collected
        if share < HOST_SHARE_MIN:
            return
        if steps.main_cpu_fraction is not None:
            evidence.append(
                Fact(
                    "host.python.main_cpu",
                    cpu_share=steps.main_cpu_fraction,
                    computing=steps.main_cpu_fraction >= 0.5,
                )
            )
        host = rank.stacks.host if rank.stacks else None
        where = Fact("host.python.where", within=host.within if host and host.within else None)
        stacks = stack_evidence(host, where)
        if stacks:
            evidence.append(stacks)
        # (On a CUDA program the host also sleeps inside forward and backward, waiting for the device.)
        waiting = _waiting_outside(steps) if rank.cuda_memory is None and rank.serving is None else 0.0
        blocked = waiting >= WAITING_EXPLAINS * steps.phase_ns.get(HOST_OTHER, 0.0)
        if blocked:
            evidence.append(Fact("host.python.asleep", asleep_ns=waiting))
        inference = steps.kind == "inference"
        owner = None if blocked or host is None else library_owned(host)
        if host is None:
            evidence.append(Fact("host.python.unnamed"))
        if owner is not None:
            # The Python is a library's own: no logging or metric change removes it, and no gain is promised.
            library, function, owned = owner
            evidence.append(Fact("host.python.library", library=library, function=function, share=owned))
        served = rank.serving is not None  # (a server's own request handling: no loop code to change)
        yield Finding(
            id=self.id,
            title=Fact("host.python.title", waiting=blocked, inference=inference, served=served),
            share=share,
            estimated_speedup=1.0 if owner is not None or served else speedup_removing(share),
            basis=Basis.NONE if owner is not None or served else Basis.REMOVED,
            confidence=Confidence.HIGH if share >= HOST_SHARE_HIGH else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("host.python.fix_server")
            if served
            else Fact("host.python.fix_library", library=owner[0])
            if owner
            else Fact("host.python.fix", waiting=blocked),
            snippet=None if owner or served else Fact("host.python.snippet", waiting=blocked),
            ranks=(rank.rank,),
            fix_kind=None if blocked or owner or served else FixKind.LOG_LESS,
        )


LIBRARY_MOST = 0.5
"""A library owns the loop's Python when the hot lines calling into it hold half the samples."""
OWN_LIBRARIES = ("torch", "builtins", "<")
"""Calls into these are the program's own doing (a tensor op per element, a Python loop): its code."""


def library_owned(host: StackScope) -> tuple[str, str, float] | None:
    """(library, its hottest function, share of the samples) when the loop's hot lines mostly sit inside
    one library's code other than torch (a Gaussian-process library's lazy tensors), else None."""
    by_lib: dict[str, list[tuple[float, str]]] = {}
    for h in host.top:
        if not h.calls_into or "(" not in h.calls_into:
            continue
        path = h.calls_into.rsplit("(", 1)[1].rstrip(")")
        library = path.split("/", 1)[0]
        if library and not library.startswith(OWN_LIBRARIES):
            by_lib.setdefault(library, []).append((h.share, h.calls_into))
    if not by_lib:
        return None
    library, hits = max(by_lib.items(), key=lambda kv: sum(x for x, _ in kv[1]))
    owned = sum(x for x, _ in hits)
    return (library, max(hits)[1], owned) if owned >= LIBRARY_MOST else None


WAITING_EXPLAINS = 0.5
"""The loop counts as waiting when the main thread's unexplained sleep covers half its outside time."""
EXPECTED_WAITS = ("data_wait", "comm", "sync_wait", "checkpoint_io")
"""Phases in which the main thread is expected to sleep (the loader, collectives, the device, disk)."""


def _waiting_outside(steps: StepStats) -> float:
    """Mean ns per step the main thread slept outside the phases where sleeping is expected."""
    if steps.main_cpu_fraction is None:
        return 0.0
    runq = steps.main_runq_fraction or 0.0
    asleep = max(0.0, 1.0 - steps.main_cpu_fraction - runq) * steps.host_mean_ns
    return max(0.0, asleep - sum(steps.phase_ns.get(p, 0.0) for p in EXPECTED_WAITS))


class HostDispatch(Rule):
    """Pattern: many tiny framework ops per step; each pays Python, dispatcher and autograd overhead.
    Why it's slow: the arithmetic per op is smaller than the fixed cost of issuing it.
    Fix: batch the work into fewer, larger ops (bmm/einsum instead of loops), torch.compile, bigger batches.
    Reference: rules-catalog §1b (TF kernel-launch bound ≥ 3%/15%), §5b (TorchTidy), HTA launch stats.

    Measure: forward/backward/optimizer time of the normal steps minus the time the op window saw in ops
    that touch a large tensor is per-op overhead and Python glue. (Reading the phases of the window's
    own steps instead, less the recorder's cost, hinged on one window step: a first-use cost there, such
    as an import, hid all of it.)
    """

    id: ClassVar[Category] = Category.HOST_DISPATCH
    title: ClassVar[str] = "Per-op framework overhead: many tiny ops per step"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "ops"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        steps, ops = rank.steps, rank.ops
        if steps is None or ops is None or ops.small_ops_per_step < MANY_SMALL_OPS or steps.mean_ns <= 0:
            return
        measured = _per_op_overhead(steps, ops, contended=rank.cpu is not None and rank.cpu.contended)
        if measured is None:
            return
        share, medians = measured
        compute_share = sum(steps.share(p) for p in COMPUTE_PHASES)
        overhead = share * steps.mean_ns
        serving = steps.kind == "inference"
        evidence = [
            Fact("host.dispatch.ops", ops=ops.top_level_ops_per_step, small_ops=ops.small_ops_per_step),
            Fact(
                "host.dispatch.overhead",
                inference=serving,
                compute_ns=compute_share * steps.mean_ns,
                large_ns=ops.large_phase_op_ns_per_step,
                overhead_ns=overhead,
                small_math_ns=ops.small_math_ns_per_step,
            ),
            Fact("host.dispatch.top_ops", ops=tuple((name, calls) for name, _, calls in ops.top_ops[:4])),
        ]
        if ops.dispatch_ns_per_op:
            evidence.append(Fact("host.dispatch.issue_cost", dispatch_ns=ops.dispatch_ns_per_op))
        compiled = ops.compiled_ns_per_step > 0
        if compiled:
            evidence.append(Fact("host.dispatch.compiled", compiled_ns=ops.compiled_ns_per_step))
        # Where the overhead sits: an optimizer looping over parameters has a one-line fix of its own.
        in_optimizer = max(
            0.0,
            medians.get(Phase.OPTIMIZER.value, steps.phase_ns.get(Phase.OPTIMIZER.value, 0.0))
            - ops.large_op_ns_by_phase.get(Phase.OPTIMIZER.value, 0.0),
        )
        in_optimizer = min(in_optimizer, overhead)
        optimizer_part = in_optimizer / overhead if overhead > 0 and not serving else 0.0
        optimizer_bound = optimizer_part >= OPTIMIZER_OVERHEAD
        mentioned = optimizer_part >= OPTIMIZER_MENTION
        if mentioned:
            fused = speedup_removing(in_optimizer / steps.mean_ns * DISPATCH_RECOVERABLE)
            evidence.append(
                Fact(
                    "host.dispatch.optimizer",
                    optimizer_ns=in_optimizer,
                    overhead_frac=optimizer_part,
                    fused_x=fused,
                )
            )
        speedup = speedup_removing(share * DISPATCH_RECOVERABLE)
        if serving:
            g = rank.generation  # (a generation loop batches at most the sequences it generates)
            batch = SERVING_BATCH if g is None else max(2, min(SERVING_BATCH, g.generations))
            speedup = _served_batched(steps, ops, share, evidence, batch)
        remedy = (
            "optimizer" if optimizer_bound else "serving" if serving else "compiled" if compiled else "ops"
        )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup,
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact(
                "host.dispatch.fix",
                remedy=remedy,
                optimizer_ns=in_optimizer if remedy == "ops" and mentioned else None,
            ),
            snippet=Fact("host.dispatch.snippet", remedy=remedy),
            ranks=(rank.rank,),
            fix_kind={"ops": FixKind.COMPILE, "optimizer": FixKind.FUSED_OPTIMIZER}.get(remedy),
        )


def _served_batched(
    steps: StepStats, ops: OpStats, share: float, evidence: list[Fact], batch: int = SERVING_BATCH
) -> float:
    """A batch-1 inference loop's gain from serving `batch` requests per call (`SERVING_BATCH`, or the
    sequences a generation loop generated one after another, if fewer: nanoGPT's sampler drawing 4
    samples batches 4, not 32). The facts that say so are added to `evidence`."""
    vector = min(1.0 - share, ops.vector_matmul_ns_per_step / steps.mean_ns)
    speedup = batched_requests(share, vector, batch)
    if vector >= VECTOR_MENTION:
        evidence.append(
            Fact("host.dispatch.vector", vector_ns=ops.vector_matmul_ns_per_step, rows=VECTOR_ROWS)
        )
    evidence.append(
        Fact(
            "host.dispatch.serving",
            batch=batch,
            request_ns=steps.mean_ns / speedup,
            step_ns=steps.mean_ns,
            speedup=speedup,
        )
    )
    return speedup


def _per_op_overhead(
    steps: StepStats, ops: OpStats, contended: bool = False
) -> tuple[float, dict[str, float]] | None:
    """(share of the mean step that is per-op overhead, the per-phase medians it was read from), or None
    when it is too small to report or inside the steps' own spread.

    `contended`: other processes kept cores busy during the steps. Then the steps' spread is no noise
    floor: they come in two kinds, those where the intra-op threads got their cores and those where
    they waited at barriers for one (80 against 220 ms on host_dispatch.py beside one busy process), and
    the spread is the gap between the kinds. The overhead is then read within the window: at most its
    fastest step's compute less the large ops its steps ran (inflated by the same waits, so this can
    only understate it), which compares no two steps."""
    compute_share = sum(steps.share(p) for p in COMPUTE_PHASES)
    # The overhead's fraction of a typical step's compute (per-phase medians: the window's steps are
    # typical ones, and a step that also evaluates would count its evaluation as overhead) is the
    # typical compute less the window's large-op time; applied to the mean step's compute share.
    # The steps around the window, when there are some: a run that drifts (memory that grows, load
    # that comes and goes) has a whole-run median the window's steps never saw.
    medians = dict(steps.near_window_phase_median_ns or steps.phase_median_ns)
    typical = sum(medians.get(p, 0.0) for p in COMPUTE_PHASES) or compute_share * steps.mean_ns
    # The small ops' own matrix math is no overhead: batching does the same FLOPs (an LSTM cell's
    # matmuls, small by their tensors, ran at 71-76 GFLOP/s of a 91 peak: x4.9 predicted, x2.36 measured)
    kept = ops.large_phase_op_ns_per_step + ops.small_math_ns_per_step
    outside = typical - kept
    if steps.window_compute_min_ns > 0:
        # the window's own steps hold the large ops plus all the true overhead (plus the recorder's
        # cost): more than that difference is the machine's moment, not the program
        outside = min(outside, steps.window_compute_min_ns - kept)
    if contended and steps.main_runq_fraction:
        # The main thread waited for a CPU through its phases too: the large ops' times hold their part
        # of those waits, and the rest sat here as "overhead" (input_tiny_batches beside a spinning
        # process: 1.97 ms of "overhead" where the main thread waited 1.9 ms a step). Dispatch is the
        # main thread's own work: without the waits it is this much.
        outside *= 1.0 - min(1.0, steps.main_runq_fraction)
    fraction = max(0.0, outside / typical) if typical > 0 else 0.0
    share = compute_share * fraction
    if ops.dispatch_ns_per_op and steps.mean_ns > 0:
        most = ops.top_level_ops_per_step * ops.dispatch_ns_per_op * OVERHEAD_PER_OP_MAX / steps.mean_ns
        share = min(share, most)
    if share < DISPATCH_SHARE_MIN:
        return None
    # The window's few steps and the typical step are different steps: the large ops were timed at
    # another moment, and a busy VM here moves the steps' compute by 20-30% over seconds. A difference
    # inside that relative spread of the large ops' time is noise (the whole spread when the large ops
    # are the step; a small part when per-op overhead is: an LBFGS step's closures made its steps'
    # spread 232 ms around a 162 ms median where large ops were 9.7 ms of it).
    # (contended: bounded by one window step that held both the large ops and the rest, the
    # difference needs no second step's spread)
    bounded_in_window = contended and steps.window_compute_min_ns > 0
    noise = steps.compute_spread_ns * min(1.0, ops.large_phase_op_ns_per_step / typical)
    if outside <= noise and not bounded_in_window:
        return None
    return share, medians
