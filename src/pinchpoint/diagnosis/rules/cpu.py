"""Thread settings read against the cores this process may use."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, cut_trial
from pinchpoint.trace.run import Phase

RUNQ_SHARE_MIN = 0.05
"""Main thread waiting for a CPU more than 5% of the step: measurable contention."""
THREAD_TRIAL_P_MAX = 0.05
"""The thread trial's steps count as faster below this (its permutation test of the means): looser
than the other trials' 0.01, since beside a busy process steps alternate fast and slow and a real gain
reaches only p = 0.02, while wrongly lowering a thread count costs little (decision 49)."""
UNDERUSE_COMPUTE_MIN = 0.30
"""Compute phases above 30% of the step before idle cores are worth reporting."""
IDLE_CORE_MIN = 0.6
"""At least this many cores' worth of CPU idle machine-wide during the steps."""
PARALLEL_EFFICIENCY = 0.85
"""Fraction of ideal scaling an extra intra-op thread gives on matmul-heavy CPU work (assumed)."""


def _compute_share(rank: RankAnalysis) -> float:
    if rank.steps is None:
        return 0.0
    return sum(rank.steps.share(p.value) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))


class CpuOversubscription(Rule):
    """Pattern: more threads want to run than there are cores (intra-op threads × processes > cores).
    Why it's slow: threads preempt each other; OpenMP barriers wait for descheduled threads.
    Fix: torch.set_num_threads(cores // processes), OMP_NUM_THREADS; one thread per DataLoader worker.
    Reference: rules-catalog §5a (tuning guide: OMP_NUM_THREADS, affinity).
    """

    id: ClassVar[Category] = Category.CPU_OVERSUBSCRIPTION
    title: ClassVar[str] = "More busy threads than cores"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "main"})

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        steps, main = rank.steps, rank.main
        if steps is None or main is None or main.threads.intra_op is None:
            return
        cores = max(1, env.cpu.usable_cores)
        intra = main.threads.intra_op
        worker_threads = sum((w.threads.intra_op or 1) for w in rank.workers)
        demand = intra * rank.local_ranks + worker_threads
        runq = steps.main_runq_fraction or 0.0
        trial = rank.thread_trial
        # Cores other processes kept busy are not the program's: the trial measured them before it ran
        # and left them out of its thread count.
        shared = trial is not None and trial.foreign_cores > 0 and trial.fit * rank.local_ranks < cores
        foreign = trial.foreign_cores if trial is not None and shared else 0.0
        free = max(1, min(cores, int(cores - foreign + 0.5))) if shared else cores
        if demand <= free or (intra <= free and runq < RUNQ_SHARE_MIN):
            return
        evidence = _evidence(rank, intra, cores, runq, foreign)
        if trial is not None and trial.contended:  # it measured something else holding the cores
            evidence.append(
                Fact(
                    "cpu.oversubscription.trial_contended",
                    fit=trial.fit,
                    threads=trial.threads,
                    trial_runq=trial.trial_runq or 0.0,
                    steady_runq=trial.steady_runq or 0.0,
                    speedup=trial.speedup,
                )
            )
            trial = None
        share = max(runq, 0.0)
        speedup = 1.0 / max(0.05, 1.0 - share)
        confidence = Confidence.HIGH if runq >= RUNQ_SHARE_MIN else Confidence.MEDIUM
        if trial is not None:
            # Measured, not modelled: pinchpoint ran a few steps at one thread per core. Steps no
            # faster (or faster by chance) measured that the threads cost nothing.
            if trial.speedup < 1 + RUNQ_SHARE_MIN:
                return
            speedup = trial.speedup
            share = 1.0 - 1.0 / speedup
            # faster, but within what the steps around it spread: said, at low confidence, rather
            # than dropped (16 threads on 2 cores measured x1.36 by whole runs, x1.05-1.14 by a trial
            # on a noisy VM)
            confidence = Confidence.HIGH if trial.p_faster <= THREAD_TRIAL_P_MAX else Confidence.LOW
            evidence.append(
                Fact(
                    "cpu.oversubscription.trial",
                    steps=trial.steps,
                    fit=trial.fit,
                    trial_ns=trial.trial_ns,
                    steady_ns=trial.steady_ns,
                    threads=trial.threads,
                    speedup=trial.speedup,
                    p=trial.p_faster,
                )
            )
        target = max(1, min(intra, (free - worker_threads) // rank.local_ranks))
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup,
            basis=Basis.TRIAL if trial is not None else Basis.REMOVED,
            confidence=confidence,
            evidence=tuple(evidence),
            fix=Fact("cpu.oversubscription.fix_shared", threads=target, foreign_cores=foreign)
            if foreign
            else Fact("cpu.oversubscription.fix", threads=target),
            snippet=Fact("cpu.oversubscription.snippet", threads=target),
            ranks=(rank.rank,),
            fix_kind=FixKind.THREADS,
            fix_params=(("threads", target),),
        )


def _evidence(rank: RankAnalysis, intra: int, cores: int, runq: float, foreign: float) -> list[Fact]:
    """What the threads and their waits say, before any trial."""
    evidence = [Fact("cpu.oversubscription.threads", threads=intra, cores=cores, workers=len(rank.workers))]
    if foreign:
        evidence.append(Fact("cpu.oversubscription.foreign", foreign_cores=foreign, cores=cores))
    evidence.append(Fact("cpu.oversubscription.runq", share=runq))
    if rank.cpu is not None:
        evidence.append(
            Fact(
                "cpu.oversubscription.switches",
                switches_per_s=rank.cpu.invol_switches_per_s,
                threads=rank.cpu.max_threads,
            )
        )
    env_vars = dict(rank.main.threads.env) if rank.main is not None else {}
    if env_vars:
        evidence.append(Fact("cpu.oversubscription.env", variables=tuple(env_vars.items())))
    evidence.extend(cut_trial(rank, "threads"))
    return evidence


class CpuUnderuse(Rule):
    """Pattern: compute-bound steps use fewer threads than the cores they may use, and cores sit idle.
    Why it's slow: intra-op parallelism would split matmuls and convolutions across the idle cores.
    Fix: torch.set_num_threads(len(os.sched_getaffinity(0))) or unset a too-low OMP_NUM_THREADS.
    Reference: rules-catalog §5a (tuning guide: intra-op threads).
    """

    id: ClassVar[Category] = Category.CPU_UNDERUSE
    title: ClassVar[str] = "Compute uses fewer cores than it could"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "main", "cpu"})

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        steps, main, cpu = rank.steps, rank.main, rank.cpu
        if steps is None or main is None or cpu is None or main.threads.intra_op is None:
            return
        # Ranks on this machine share its cores: each may use its part of them.
        cores = max(1, env.cpu.usable_cores // rank.local_ranks)
        intra = main.threads.intra_op
        compute = _compute_share(rank)
        idle = env.cpu.usable_cores - cpu.machine_busy_cores
        if (
            intra < 1
            or not math.isfinite(idle)
            or intra >= cores
            or compute < UNDERUSE_COMPUTE_MIN
            or idle < IDLE_CORE_MIN
        ):
            return
        scale = 1.0 + (cores / intra - 1.0) * PARALLEL_EFFICIENCY
        saved = compute * (1.0 - 1.0 / scale)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=saved,
            estimated_speedup=1.0 / (1.0 - saved),
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=(
                Fact("cpu.underuse.threads", share=compute, threads=intra, cores=cores),
                Fact("cpu.underuse.idle", idle_cores=idle, process_cores=cpu.process_cores),
            ),
            fix=Fact("cpu.underuse.fix", threads=cores),
            snippet=Fact("cpu.underuse.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.THREADS,
            fix_params=(("threads", cores),),
        )
