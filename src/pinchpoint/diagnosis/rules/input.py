"""Input-bound steps, told apart by what the loading processes did while the step waited.

`input.fetch`: the loaders mostly slept (storage, network, latency) — more workers overlap it and cost
little CPU. `input.preprocess`: the loaders were on a CPU or waiting for one (decode, augment,
tokenize) — more workers only help if the cores have room, so the estimate models CPU capacity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from pinchpoint.analysis.loader import LoaderActivity, WorkerTrialResult
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.costs import LoaderLoad, WorkerPlan, more_workers
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import (
    Rule,
    Subject,
    cut_trial,
    short_site,
    speedup_removing,
    stack_evidence,
)
from pinchpoint.trace.run import Phase

INPUT_SHARE_MIN = 0.05
"""Data wait above 5% of the step: Kineto TensorBoard plugin's DataLoader rule (rules-catalog §5e);
TF/XProf grade 5–20% moderate, ≥ 20% high (§1b)."""
INPUT_SHARE_HIGH = 0.20
SLEEP_FRACTION_IO = 0.5
"""Loaders asleep for more than half their fetch time: I/O- or latency-bound (cf. XProf's host-input
split, rules-catalog §1e, which uses ≥ 50% for the dominant side)."""
TRANSFER_BOUND = 0.5
"""Receiving the workers' batches (the loader probe's cost per batch) is at least half the data wait."""
MAX_IO_WORKERS = 8
"""Most workers suggested for sleeping (I/O-bound) loaders: each is a process with its own memory."""


def _data_wait(rank: RankAnalysis) -> tuple[float, float, float] | None:
    """(share, wait ns per step, step ns) when the wait is big enough to report. Where the loader's
    workers start again every epoch, what each epoch's first step waits for that is
    `input.worker_restart`'s, not a steady wait: it is left out (more workers would restart too)."""
    steps = rank.steps
    if steps is None:
        return None
    share = steps.share(Phase.DATA_WAIT.value)
    wait_ns, step_ns = steps.phase_ns.get(Phase.DATA_WAIT.value, 0.0), steps.mean_ns
    if rank.restarts is not None:
        restart_ns = min(wait_ns, rank.restarts.saved_ns / max(1, rank.restarts.steps))
        wait_ns, step_ns = wait_ns - restart_ns, step_ns - restart_ns
        share = wait_ns / step_ns if step_ns > 0 else 0.0
    if share < INPUT_SHARE_MIN:
        return None
    return share, wait_ns, step_ns


def _is_io_bound(loader: LoaderActivity | None) -> bool | None:
    if loader is None or loader.wall_ns == 0:
        return None
    return loader.sleep_fraction >= SLEEP_FRACTION_IO


def _wait_evidence(share: float, wait_ns: float, step_ns: float) -> Fact:
    return Fact("input.loader.wait", share=share, wait_ns=wait_ns, step_ns=step_ns)


def _loader_evidence(loader: LoaderActivity) -> Fact:
    return Fact(
        "input.loader.activity",
        per_batch_ns=loader.per_batch_ns,
        in_process=loader.in_main_process,
        processes=loader.processes,
        cpu_frac=loader.cpu_fraction,
        runq_frac=loader.runq_fraction,
        sleep_frac=loader.sleep_fraction,
    )


def _loader_stacks(rank: RankAnalysis) -> Fact | None:
    loader = rank.loader
    where = Fact("input.loader.stacks_where", in_process=bool(loader and loader.in_main_process))
    return stack_evidence(rank.stacks.loader if rank.stacks else None, where)


def _batches_per_step(rank: RankAnalysis, loader: LoaderActivity) -> float:
    """Batches each step consumes, a whole number (gradient accumulation fetches several; prefetching
    workers blur the window's edges by a batch). The batches were counted over every step of the
    steady steps' time, so they are divided by all of those: beside a busy process, the steady steps
    alone (the undisturbed ones) were a fifth fewer, and 4 batches a step read as 5."""
    count = loader.steps or (rank.steps.count if rank.steps is not None else 0)
    return float(max(1, round(loader.batches / count))) if count else 1.0


def _transfer(rank: RankAnalysis, bps: float) -> tuple[float, float]:
    """(worker-side, training-process-side) ns per step that moving batches through workers would add,
    from the loader probe (0, 0 when it didn't run: the program already has workers, or no op window)."""
    t = rank.probes.loader_transfer
    return (bps * t.worker_ns, bps * t.receive_ns) if t is not None else (0.0, 0.0)


def _batched_step(
    rank: RankAnalysis, loader: LoaderActivity, bps: float, wait_ns: float, *, in_workers: bool = False
) -> tuple[float, int] | None:
    """(data wait per step, ns per batched fetch) with whole-batch fetches in the training process: the
    probe's batched indexing for each batch, plus the DataLoader's own time per batch (the wait outside
    the fetch) when the fetches already ran there; from workers, that rest of the wait is the transfer
    the fix removes."""
    t = rank.probes.loader_transfer
    if t is None or t.batched_ns is None:
        return None
    outside = 0.0 if in_workers else max(0.0, wait_ns / bps - loader.per_batch_ns)
    return min(wait_ns, bps * (outside + t.batched_ns)), t.batched_ns


def _transfer_evidence(rank: RankAnalysis, fetch_ns: float, workers: int = 0) -> Fact | None:
    t = rank.probes.loader_transfer
    if t is None:
        return None
    return Fact(
        "input.loader.transfer",
        batch_bytes=t.batch_bytes,
        worker_ns=t.worker_ns,
        receive_ns=t.receive_ns,
        fetch_ns=fetch_ns,
        in_workers=bool(workers),
    )


def _settings(loader: LoaderActivity | None) -> Fact | None:
    if loader is None or loader.config is None:
        return None
    c = loader.config
    return Fact(
        "input.loader.settings",
        num_workers=c.num_workers,
        batch_size=c.batch_size,
        pin_memory=c.pin_memory,
        persistent_workers=c.persistent_workers,
        prefetch_factor=c.prefetch_factor,
        site=short_site(c.site),
    )


class InputFetch(Rule):
    """Pattern: steps block in the DataLoader while the loaders sleep (storage, network, latency).
    Why it's slow: the step cannot start until a batch arrives; loading is serialized with compute.
    Fix: more DataLoader workers (or threads) to overlap the latency; prefetch; local cache.
    Reference: rules-catalog §5e (Kineto DataLoader > 5%), §10 (DS-Analyzer fetch stalls).
    """

    id: ClassVar[Category] = Category.INPUT_FETCH
    title: ClassVar[str] = "Steps wait for data; the loader is waiting on I/O, not computing"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})
    quiet_without: ClassVar[str | None] = Phase.DATA_WAIT.value

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        dw = _data_wait(rank)
        if dw is None:
            return
        io_bound = _is_io_bound(rank.loader)
        if io_bound is False:
            return
        share, wait_ns, step_ns = dw
        compute_ns = max(1.0, step_ns - wait_ns)
        evidence: list[Fact] = [_wait_evidence(share, wait_ns, step_ns)]
        loader = rank.loader
        current = loader.config.num_workers if loader and loader.config else 0
        if loader is not None:
            evidence.append(_loader_evidence(loader))
            bps = _batches_per_step(rank, loader)
            per_step = bps * loader.per_batch_ns
            send, receive = _transfer(rank, bps)
            workers = max(current + 2, min(MAX_IO_WORKERS, math.ceil(per_step / compute_ns) + 1))
            predicted = max(compute_ns + receive, (per_step + send) / workers)
            speedup = max(1.0, step_ns / predicted)
            transfer = _transfer_evidence(rank, loader.per_batch_ns)
            if transfer:
                evidence.append(transfer)
            confidence = Confidence.HIGH if share >= INPUT_SHARE_HIGH else Confidence.MEDIUM
        else:
            evidence.append(Fact("input.loader.unrecorded"))
            workers = max(current + 2, 4)
            speedup = speedup_removing(share)
            confidence = Confidence.LOW
        stacks = _loader_stacks(rank)
        if stacks:
            evidence.append(stacks)
        settings = _settings(loader)
        if settings:
            evidence.append(settings)
        basis = Basis.MODEL if loader is not None else Basis.REMOVED
        trial = rank.worker_trial
        evidence.extend(cut_trial(rank, "workers"))
        if trial is not None:
            evidence.append(_trial_evidence(trial))
            if trial.pays:  # measured with the program's own batches: it stands over the model
                workers, speedup, basis = trial.workers, trial.speedup, Basis.TRIAL
                confidence = Confidence.HIGH
            elif trial.complete:  # the workers did not pay here, whatever the model says
                workers, speedup, basis = trial.workers, max(1.0, trial.speedup), Basis.TRIAL
                confidence = Confidence.LOW
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup,
            basis=basis,
            confidence=confidence,
            evidence=tuple(evidence),
            fix=Fact("input.fetch.fix", workers=workers, cores=env.cpu.usable_cores),
            snippet=Fact("input.fetch.snippet", workers=workers),
            ranks=(rank.rank,),
            fix_kind=FixKind.WORKERS,
            fix_params=(("num_workers", workers),),
        )


class InputPreprocess(Rule):
    """Pattern: steps block in the DataLoader while the loaders are busy on a CPU (or queued for one).
    Why it's slow: decoding/augmenting/tokenizing costs more CPU per batch than the step has time for.
    Fix: cheaper or cached preprocessing; more workers only if cores are free (they compete with compute).
    Reference: rules-catalog §1e (XProf host preprocessing ≥ 50% of input), §10 (DS-Analyzer prep stalls).
    """

    id: ClassVar[Category] = Category.INPUT_PREPROCESS
    title: ClassVar[str] = "Steps wait for data; the loader is CPU-bound preprocessing"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "loader"})
    quiet_without: ClassVar[str | None] = Phase.DATA_WAIT.value

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        dw = _data_wait(rank)
        loader = rank.loader
        if dw is None or loader is None or _is_io_bound(loader) is not False:
            return
        share, wait_ns, step_ns = dw
        cores = max(1, env.cpu.usable_cores)
        compute_ns = max(1.0, step_ns - wait_ns)
        bps = _batches_per_step(rank, loader)
        prep_batch = loader.cpu_ns / loader.batches if loader.batches else 0.0
        prep_cpu = bps * prep_batch  # per step
        # What workers would add: the worker copies each batch into shared memory and sends it, the
        # training process maps it back (the loader probe; 0 when it did not run).
        send, receive = _transfer(rank, bps)
        # CPU demand of everything else per step: the tree's CPU use minus the loading work.
        intra = rank.main.threads.intra_op if rank.main is not None else None
        if rank.cpu is not None:
            tree_cpu = rank.cpu.process_cores * step_ns
        else:  # no system samples: assume compute keeps its intra-op threads busy
            tree_cpu = compute_ns * min(cores, max(1, intra or cores)) + prep_cpu
        current = loader.config.num_workers if loader.config else 0
        load = LoaderLoad(
            step_ns=step_ns,
            wait_ns=wait_ns,
            prep_cpu_ns=prep_cpu,
            send_ns=send,
            receive_ns=receive,
            other_cpu_ns=max(compute_ns, tree_cpu - prep_cpu),
            cores=cores,
            workers=current,
        )
        plan = more_workers(load)
        speedup_workers = step_ns / plan.step_ns
        evidence: list[Fact] = [
            _wait_evidence(share, wait_ns, step_ns),
            _loader_evidence(loader),
            Fact(
                "input.preprocess.cpu",
                prep_batch_ns=prep_batch,
                batches_per_step=bps,
                other_cpu_ns=load.other_cpu_ns,
                cores=cores,
            ),
            Fact(
                "input.preprocess.options",
                workers_x=speedup_workers,
                workers=plan.workers,
                threads=plan.threads,
                cores=cores,
                cheaper_x=speedup_removing(share),
            ),
        ]
        extra = (
            _transfer_evidence(rank, loader.per_batch_ns, current),
            _loader_stacks(rank),
            _settings(loader),
        )
        evidence.extend(e for e in extra if e)
        trial = rank.worker_trial
        evidence.extend(cut_trial(rank, "workers"))
        if trial is not None:
            evidence.append(_trial_evidence(trial))
        remedy = _preprocess_remedy(rank, loader, load, plan, bps, share)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=max(1.0, remedy.speedup),
            basis=remedy.basis,
            confidence=Confidence.HIGH if share >= INPUT_SHARE_HIGH else Confidence.MEDIUM,
            evidence=(*evidence, *remedy.evidence),
            fix=remedy.fix,
            snippet=remedy.snippet,
            ranks=(rank.rank,),
            fix_kind=remedy.kind,
            fix_params=(("num_workers", remedy.workers),),
        )


def _trial_evidence(trial: WorkerTrialResult) -> Fact:
    return Fact(
        "input.workers.trial",
        workers=trial.workers,
        steps=trial.steps,
        trial_ns=trial.trial_median_ns,
        steady_ns=trial.steady_median_ns,
        speedup=trial.speedup,
        p=trial.p_faster,
        pays=trial.pays,
        complete=trial.complete,
    )


def _trial_workers(trial: WorkerTrialResult, cores: int) -> _Remedy:
    """Measured with the program's own batches and cores: never advise against a fix that paid."""
    return _Remedy(
        fix=Fact("input.preprocess.fix_workers", workers=trial.workers, threads=None, cores=cores),
        speedup=trial.speedup,
        basis=Basis.TRIAL,
        snippet=Fact("input.preprocess.snippet_workers", workers=trial.workers, threads=None),
        kind=FixKind.WORKERS,
        workers=trial.workers,
    )


@dataclass(frozen=True, slots=True)
class _Remedy:
    fix: Fact
    speedup: float
    basis: Basis
    snippet: Fact
    kind: FixKind | None
    workers: int
    evidence: tuple[Fact, ...] = ()


def _preprocess_remedy(
    rank: RankAnalysis, loader: LoaderActivity, load: LoaderLoad, plan: WorkerPlan, bps: float, share: float
) -> _Remedy:
    """More workers when they pay; whole-batch fetches in the training process when moving a batch out
    of a worker costs more than fetching it; otherwise cheaper preprocessing."""
    cores, current, receive, wait_ns = load.cores, load.workers, load.receive_ns, load.wait_ns
    speedup_workers = load.step_ns / plan.step_ns
    speedup_cheaper = speedup_removing(share)
    trial = rank.worker_trial
    if trial is not None and trial.pays:
        return _trial_workers(trial, cores)
    if speedup_workers >= 1.15 and plan.workers > current and trial is None:
        return _Remedy(
            fix=Fact("input.preprocess.fix_workers", workers=plan.workers, threads=plan.threads, cores=cores),
            speedup=speedup_workers,
            basis=Basis.MODEL,
            snippet=Fact("input.preprocess.snippet_workers", workers=plan.workers, threads=plan.threads),
            kind=FixKind.WORKERS,
            workers=plan.workers,
        )
    # Workers already load, and most of the wait is the training process receiving their batches.
    transfer_bound = current > 0 and receive >= TRANSFER_BOUND * wait_ns
    # Workers cost more per batch than the fetch itself: the fetch is cheap and just done too often
    # (a per-sample __getitem__ and collate over in-memory tensors).
    cheap_fetch = transfer_bound or (
        rank.probes.loader_transfer is not None and (load.send_ns + receive) >= load.prep_cpu_ns
    )
    if not cheap_fetch:
        return _Remedy(
            fix=Fact("input.preprocess.fix_cheaper", cores=cores),
            speedup=speedup_cheaper,
            basis=Basis.REMOVED,
            snippet=Fact("input.preprocess.snippet_cache"),
            kind=None,
            workers=current,
        )
    evidence: list[Fact] = []
    if transfer_bound:
        evidence.append(
            Fact(
                "input.preprocess.transfer_bound",
                receive_ns=receive,
                batches_per_step=bps,
                receive_frac=min(1.0, receive / wait_ns),
                fetch_ns=loader.per_batch_ns,
            )
        )
    batched = _batched_step(rank, loader, bps, wait_ns, in_workers=transfer_bound)
    if batched is not None:
        new_wait, per_fetch = batched
        speedup_cheaper = load.step_ns / max(1.0, load.step_ns - wait_ns + new_wait)
        evidence.append(
            Fact(
                "input.preprocess.whole_batches",
                fetch_ns=per_fetch,
                wait_ns=new_wait,
                speedup=speedup_cheaper,
            )
        )
    return _Remedy(
        fix=Fact(
            "input.preprocess.fix_whole_batches",
            transfer_bound=transfer_bound,
            workers=current,
            workers_x=speedup_workers,
        ),
        speedup=speedup_cheaper,
        basis=Basis.PROBE if batched is not None else Basis.REMOVED,
        snippet=Fact("input.preprocess.snippet_whole_batches"),
        kind=FixKind.LOAD_IN_PROCESS,
        workers=0 if transfer_bound else current,
        evidence=tuple(evidence),
    )
