"""Memory that grows step over step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.memory import AllocTrialResult, PageFaults, graph_growth
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, cut_trial, speedup_removing
from pinchpoint.stats.ranks import TRIAL_P_MAX
from pinchpoint.trace.trials import GLIBC_ENV

MIB = 1 << 20
LEAK_MIN_SLOPE = 256 * 1024
"""At least 256 KiB more resident memory per step."""
LEAK_NOISE_T = 3.0
"""And the slope is that steep beyond its noise: `LEAK_NOISE_T` standard errors of the fit below it, it is
still ≥ `LEAK_MIN_SLOPE`. Three, not two: by chance alone a slope sits 3 standard errors high in under
1% of fits of 10 steps or more (one-sided t), and RSS's residuals are not independent (the allocator
holds plateaus), so the fit's standard error reads low; a steady leak stands far clear (memory_leak.py's
chunked growth, as its test records it: 2.4 MiB a step, 28 standard errors)."""
LEAK_MIN_GROWTH = 32 * MIB
"""And at least 32 MiB grown over the measured steps (allocator caches settle below this)."""
LEAK_MIN_R2 = 0.8
"""The growth is steady: a line explains ≥ 80% of the variance of RSS per step."""
LEAK_MAX_CONCENTRATION = 0.5
"""And spread over the steps: the three largest step-to-step rises hold at most half of it (RSS that
rose in a few jumps is an allocator's high-water mark or a cache filled once, not a leak)."""
LEAK_MIN_RISING = 0.3
"""Unless RSS rose in at least 30% of the step-to-step intervals: a leak glibc serves in chunks puts
half its growth in three rises of 21 steps (memory_leak.py here: +10, +9, +6 MiB, rising in 53% of
them) where a high-water mark rises in one or two."""
LEAK_SPREAD_STEPS = 10
"""Steps needed before the spread is judged (fewer: three rises may be all there is)."""


class MemoryLeak(Rule):
    """Pattern: resident memory grows linearly with the step count.
    Why it's slow: eventually OOM; before that, allocator and GC churn. The classic cause is keeping
    tensors that hold the autograd graph alive (`history.append(loss)`).
    Fix: store Python numbers (`loss.item()`) or detached tensors; clear lists that grow per step.
    Reference: PyTorch FAQ "My model reports cuda runtime error(2): out of memory" (accumulating history).
    """

    id: ClassVar[Category] = Category.MEMORY_LEAK
    title: ClassVar[str] = "Memory grows every step"
    requires: ClassVar[frozenset[str]] = frozenset({"memory"})

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        trend = rank.memory
        if trend is None:
            return
        if (
            trend.slope_bytes_per_step - LEAK_NOISE_T * trend.slope_stderr_bytes < LEAK_MIN_SLOPE
            or trend.growth_bytes < LEAK_MIN_GROWTH
            or trend.r2 < LEAK_MIN_R2
            or (
                trend.steps >= LEAK_SPREAD_STEPS
                and trend.concentration > LEAK_MAX_CONCENTRATION
                and trend.rising < LEAK_MIN_RISING
            )
        ):
            return
        evidence = [
            Fact(
                "memory.leak.growth",
                slope_bytes=trend.slope_bytes_per_step,
                r2=trend.r2,
                first_bytes=trend.first_rss_bytes,
                last_bytes=trend.last_rss_bytes,
                steps=trend.steps,
            )
        ]
        graph = graph_growth(rank.probes)
        kept_graphs = graph is not None and graph.per_step >= GRAPH_GROWTH_MIN
        if graph is not None and kept_graphs:
            evidence.append(
                Fact(
                    "memory.leak.graphs_kept",
                    before=graph.before,
                    after=graph.after,
                    steps=graph.steps,
                    per_step=graph.per_step,
                    storage_bytes=graph.bytes_per_step,
                    groups=tuple((g.shape, g.dtype, g.grad_fn, g.per_step) for g in graph.groups),
                )
            )
        elif graph is not None:
            evidence.append(Fact("memory.leak.graphs_flat", before=graph.before, after=graph.after))
        if env.memory_bytes:
            left = env.memory_bytes - trend.last_rss_bytes
            evidence.append(
                Fact(
                    "memory.leak.runway",
                    machine_bytes=env.memory_bytes,
                    steps_left=max(0, left) / trend.slope_bytes_per_step,
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=0.0,
            estimated_speedup=1.0,
            basis=Basis.NONE,
            confidence=Confidence.HIGH if trend.r2 >= 0.95 else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("memory.leak.fix", kept_graphs=kept_graphs),
            snippet=Fact("memory.leak.snippet"),
            ranks=(rank.rank,),
        )


GRAPH_GROWTH_MIN = 0.5
"""Tensors with autograd history added per step (net, across the op window) that name the culprit: a
loop that keeps one loss per step adds 1.0; noise between two snapshots is 0."""
CHURN_MIN_SHARE = 0.05
"""Page faults cost at least 5% of the step (measured faults × measured cost per fault, bounded by the
step's measured kernel time)."""
CHURN_MIN_FAULTS = 256
"""And at least 1 MiB of fresh 4 KiB pages per step: a steady heap faults almost never."""
RESTORED_FAULTS_MIN = 0.5
"""Steps after the allocator trial that fault less than half as much as the ones before: glibc's
thresholds were set back only approximately (it stops moving them once a program sets them)."""
GLIBC_FIX = " ".join(f"{k}={v}" for k, v in GLIBC_ENV.items())


class AllocatorChurn(Rule):
    """Pattern: thousands of minor page faults every step, at a measured cost per fault.
    Why it's slow: glibc malloc serves big blocks (activations, gradients) with mmap and unmaps them
    on free, or trims its heap; every step the kernel maps and zeroes the same memory again, one 4 KiB
    page per fault, on the threads that should be computing.
    Fix: a caching allocator (jemalloc or tcmalloc via LD_PRELOAD, as PyTorch's CPU performance tuning
    guide recommends) or glibc's own thresholds raised so the heap keeps the memory.
    Reference: PyTorch "Performance Tuning Guide" (CPU: switch memory allocator); glibc mallopt(3)
    M_MMAP_THRESHOLD / M_TRIM_THRESHOLD.
    """

    id: ClassVar[Category] = Category.MEMORY_PRESSURE
    title: ClassVar[str] = "Allocator churn: memory is page-faulted in again every step"
    requires: ClassVar[frozenset[str]] = frozenset({"faults"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        pf, trial = rank.faults, rank.alloc_trial
        if pf is None:
            return
        verdict = _trial_verdict(trial)
        if verdict == "no gain":
            return  # the faults are real, but keeping the memory does not buy a faster step here
        if trial is not None and verdict == "gain":
            # Measured, not modelled: pinchpoint ran steps with the thresholds the fix sets.
            share = 1.0 - 1.0 / max(1.0, trial.bounded_speedup)
            speedup, basis = trial.bounded_speedup, Basis.TRIAL
            confidence = Confidence.HIGH if share >= 2 * CHURN_MIN_SHARE else Confidence.MEDIUM
        else:  # no trial, or one the steps' drift left undecided: the fault model, said so
            model_share = pf.step_share
            if pf.churn_per_step < CHURN_MIN_FAULTS or model_share is None or model_share < CHURN_MIN_SHARE:
                return
            share, speedup, basis = model_share, speedup_removing(model_share), Basis.REMOVED
            confidence = Confidence.LOW if trial is not None else Confidence.MEDIUM
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup,
            basis=basis,
            confidence=confidence,
            evidence=(_faults_fact(pf), *_cost_facts(pf, trial), *cut_trial(rank, "alloc")),
            fix=Fact("memory.churn.fix"),
            snippet=Fact("memory.churn.snippet", env=GLIBC_FIX),
            ranks=(rank.rank,),
            fix_kind=FixKind.ALLOCATOR,
        )


TRIAL_SLOWER_P = 0.05
"""The trial's steps are longer than the reference beyond chance: the fix does not pay here."""


def _trial_verdict(trial: AllocTrialResult | None) -> str:
    """ "gain" (faster beyond the steps' spread, by `CHURN_MIN_SHARE` or more), "no gain" (faster by
    less, or slower beyond chance), "undecided" (the steps drifted as much as the trial moved them;
    the fault model prices it, at low confidence), or "none" without a trial."""
    if trial is None:
        return "none"
    share = 1.0 - 1.0 / max(1.0, trial.bounded_speedup)
    if trial.p_faster <= TRIAL_P_MAX:
        return "gain" if share >= CHURN_MIN_SHARE else "no gain"
    return "no gain" if trial.p_slower <= TRIAL_SLOWER_P else "undecided"


def _faults_fact(pf: PageFaults) -> Fact:
    return Fact(
        "memory.churn.faults",
        faults=pf.median_per_step,
        steps=pf.steps,
        before_window=pf.before_window,
        growth_pages=pf.growth_pages_per_step,
        fresh_bytes=pf.churn_per_step * 4096,
    )


def _cost_facts(pf: PageFaults, trial: AllocTrialResult | None) -> tuple[Fact, ...]:
    """What the faults cost: the trial's steps when there was one, else the fault model."""
    if trial is not None:
        measured = Fact(
            "memory.churn.trial",
            steps=trial.steps,
            mmap_bytes=trial.mmap_threshold,
            trim_bytes=trial.trim_threshold,
            trial_ns=trial.trial_median_ns,
            steady_ns=trial.steady_median_ns,
            faults_before=trial.faults_before,
            trial_faults=trial.trial_faults,
            speedup=trial.speedup,
            p=trial.p_faster,
        )
        after = trial.faults_after
        facts: tuple[Fact, ...] = (measured,)
        if trial.bounded_speedup < trial.speedup and trial.kernel_saved_ns is not None:
            facts += (
                Fact(
                    "memory.churn.trial_bounded",
                    saved_ns=trial.steady_median_ns - trial.trial_median_ns,
                    kernel_ns=trial.kernel_saved_ns,
                    speedup=trial.bounded_speedup,
                ),
            )
        if after is not None and after < RESTORED_FAULTS_MIN * trial.faults_before:
            facts += (Fact("memory.churn.restored", faults_before=trial.faults_before, faults_after=after),)
        if _trial_verdict(trial) != "undecided":
            return facts
        return (*facts, Fact("memory.churn.undecided"), *_cost_facts(pf, None))
    share = pf.step_share or 0.0
    model = Fact(
        "memory.churn.fault_cost",
        fault_ns=pf.fault_ns,
        bounded=pf.kernel_ns is not None,
        model_ns=pf.model_ns or 0,
        step_ns=pf.median_step_ns,
        share=share,
    )
    if pf.kernel_ns is None:
        return (model,)
    kernel = Fact(
        "memory.churn.kernel_time",
        main_thread=pf.main_sys_ns is not None,
        kernel_ns=pf.kernel_ns,
        cost_ns=pf.cost_ns or 0,
        share=share,
    )
    return (model, kernel)
