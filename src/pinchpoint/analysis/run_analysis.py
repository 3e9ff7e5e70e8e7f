"""Every analysis of a run, per rank: the one input the diagnosis rules read."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pinchpoint.analysis.between_updates import BetweenUpdates, between_updates
from pinchpoint.analysis.checkpoint import SaveCost, save_cost
from pinchpoint.analysis.comm import CommActivity, comm_activity
from pinchpoint.analysis.compiles import CompileStats, compile_stats
from pinchpoint.analysis.cpu import CpuUsage, ThreadTrialResult, cpu_usage, thread_trial
from pinchpoint.analysis.cpu_waits import CpuWaits, cpu_waits
from pinchpoint.analysis.gc import GcStats, gc_stats
from pinchpoint.analysis.generation import Recompute, recompute
from pinchpoint.analysis.load import LoadSplit, split_by_load
from pinchpoint.analysis.loader import LoaderActivity, WorkerTrialResult, loader_activity, worker_trial
from pinchpoint.analysis.memory import (
    AllocTrialResult,
    CudaMemory,
    MemoryTrend,
    PageFaults,
    alloc_trial,
    cuda_memory,
    memory_trend,
    page_faults,
)
from pinchpoint.analysis.native import NativeBreakdown, native_breakdown
from pinchpoint.analysis.ops import OpStats, op_stats
from pinchpoint.analysis.restarts import WorkerRestarts, worker_restarts
from pinchpoint.analysis.roofline import MemoryTraffic, memory_traffic
from pinchpoint.analysis.run_time import RunTime, main_samples, run_time
from pinchpoint.analysis.serving import Serving, serving
from pinchpoint.analysis.stacks import StackSummary, stack_summary
from pinchpoint.analysis.stalls import Stalls, stalls
from pinchpoint.analysis.steps import StepStats, steady_steps, step_stats, why_no_steps
from pinchpoint.analysis.stopped import Stopped, stopped
from pinchpoint.trace.run import Environment, Probes, ProcessInfo, RankData, Role, Run
from pinchpoint.trace.trials import TrialCut


@dataclass(frozen=True, slots=True, kw_only=True)
class RankAnalysis:
    rank: int
    steps: StepStats | None
    loader: LoaderActivity | None
    cpu: CpuUsage | None
    ops: OpStats | None
    memory: MemoryTrend | None
    main: ProcessInfo | None
    faults: PageFaults | None = None
    workers: tuple[ProcessInfo, ...] = ()
    probes: Probes = field(default_factory=Probes)
    local_ranks: int = 1
    """Ranks of this run on this machine (each with its own intra-op threads on the same cores)."""
    cuda_memory: CudaMemory | None = None
    """The CUDA allocator's counters at step ends (CUDA programs)."""
    traffic: MemoryTraffic | None = None
    """Elementwise memory traffic and fusion chains in the op window."""
    stacks: StackSummary | None = None
    """Where the Python stack samples landed (`pinchpoint run --stacks`)."""
    native: NativeBreakdown | None = None
    """Where the native (perf) samples of the rank's processes went (`pinchpoint run --native`)."""
    comm: CommActivity | None = None
    """Collectives and DDP's gradient all-reduce wait per step (distributed programs)."""
    thread_trial: ThreadTrialResult | None = None
    """Steps pinchpoint ran with one intra-op thread per core, against the steady step."""
    alloc_trial: AllocTrialResult | None = None
    """Steps pinchpoint ran with glibc's mmap and trim thresholds raised, against the steady step."""
    worker_trial: WorkerTrialResult | None = None
    """Steps whose batches pinchpoint loaded with DataLoader workers, against the steady step."""
    trial_cut: TrialCut | None = None
    """A trial the program's end cut short (its finding then comes from a model)."""
    load: LoadSplit | None = None
    waits: CpuWaits | None = None
    """Beside a load that lasted the whole run: the threads' waits for a CPU, which bound the step
    without it (`analysis/cpu_waits.py`)."""
    """Which steady steps ran beside other processes' work; when `used`, the statistics above come
    from the clean ones alone."""
    saves: SaveCost | None = None
    """Checkpoints among the steady steps and what the steps after them cost (some steps saving)."""
    gc: GcStats | None = None
    """Python's garbage collections in the steady steps, and the lines that call `gc.collect()`."""
    stalls: Stalls | None = None
    """A few steps far slower than the rest (a stall every N steps), and what they have in common."""
    run_time: RunTime | None = None
    """Where the whole run's wall clock went on this rank (start-up, steps by kind, between steps,
    shutdown): the steps' statistics above are only part of it."""
    stopped: Stopped | None = None
    """A rank that stopped making steps long before the run ended (a hung collective)."""
    between: BetweenUpdates | None = None
    """The trained model's calls between its updates (rollouts or evaluation passes), where it has any."""
    restarts: WorkerRestarts | None = None
    """The training loader's workers started again with each iterator (every epoch), and their cost."""
    compiles: CompileStats | None = None
    """What torch.compile's compilations and recompiles cost the run."""
    generation: Recompute | None = None
    """A generation loop whose model calls recompute the context so far (no KV cache)."""
    serving: Serving | None = None
    """A server's load (`run --load`) and this rank's model calls meanwhile (the first rank only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunAnalysis:
    run: Run
    ranks: tuple[RankAnalysis, ...]
    no_steps: str | None = None
    """Why no step was recorded, and how to mark steps (`steps.why_no_steps`); None when there are steps."""

    @property
    def run_time(self) -> RunTime | None:
        """Where the whole run's wall clock went, on the first rank."""
        return self.ranks[0].run_time if self.ranks else None

    @property
    def serving(self) -> Serving | None:
        """A server's load (`run --load`) and its model calls meanwhile (on the first rank; none where
        no process of the server imported torch)."""
        if self.run.served is None:
            return None
        first = self.ranks[0].serving if self.ranks else None
        return first if first is not None else serving(self.run.served, None)

    @property
    def environment(self) -> Environment:
        return self.run.environment


def analyze_rank(run: Run, rank: RankData) -> RankAnalysis:
    rank, load = split_by_load(rank, run.system)  # (steps beside another process's load marked)
    clean = load is not None and load.used
    stats = step_stats(rank)
    steady = steady_steps(rank.steps)
    main = rank.main
    loader = cpu = None
    if stats is not None:
        loader = loader_activity(rank, stats.start_ns, stats.end_ns)
        cpu = cpu_usage(run, stats.start_ns, stats.end_ns, main.pid if main else None, clean_only=clean)
    ops = op_stats(rank.opwindow, rank.probes, rank.steps) if rank.opwindow is not None else None
    stacks = None
    main_timeline = main_samples(run.stacks, main.pid) if run.stacks is not None and main is not None else []
    if run.stacks is not None and main is not None:
        workers = {p for c in rank.loaders for p in c.worker_pids} | {f.pid for f in rank.fetches}
        stacks = stack_summary(run.stacks, [main.pid], workers - {main.pid}, run.meta.cwd, main.loop)
    native = None
    if run.native is not None:
        pids = {p.pid for p in rank.processes}
        native = native_breakdown(run.native, pids if len(run.ranks) > 1 else None)
    return RankAnalysis(
        rank=rank.rank,
        load=load,
        waits=(
            cpu_waits(steady, run.system, main.pid, cpu.foreign_cores)
            if cpu is not None and main is not None and cpu.contended and not clean and _fits(run, main)
            else None
        ),
        native=native,
        steps=stats,
        loader=loader,
        cpu=cpu,
        ops=ops,
        memory=memory_trend(steady),
        saves=save_cost(steady),
        gc=gc_stats(steady, rank.gc, run.meta.cwd),
        run_time=run_time(run.meta, rank, run.stacks, main.pid if main is not None else None),
        stalls=stalls(steady, main_timeline, run.meta.cwd),
        stopped=stopped(run.meta, rank, run.stacks, main.pid if main is not None else None),
        between=between_updates(rank, main_timeline),
        restarts=worker_restarts(rank),
        compiles=compile_stats(rank.compiles, steady),
        generation=recompute(rank.steps, rank.context_cost),
        serving=serving(run.served, rank)
        if run.served is not None and rank.rank == run.ranks[0].rank
        else None,
        faults=page_faults(
            steady,
            min((s.index for s in rank.steps if s.profiled), default=None),
            rank.probes.page_fault_ns,
        ),
        main=main,
        workers=tuple(p for p in rank.processes if p is not main and p.role is Role.WORKER),
        probes=rank.probes,
        stacks=stacks,
        comm=comm_activity(rank),
        thread_trial=thread_trial(rank, stats.host_median_ns if stats is not None else None),
        alloc_trial=alloc_trial(rank, stats.host_median_ns if stats is not None else None),
        worker_trial=worker_trial(rank, stats.host_median_ns if stats is not None else None),
        trial_cut=rank.trial_cut,
        traffic=memory_traffic(rank.opwindow) if rank.opwindow is not None else None,
        cuda_memory=cuda_memory(
            rank.steps,
            main.cuda_devices[0].total_memory_bytes if main is not None and main.cuda_devices else None,
        ),
    )


def _fits(run: Run, main: ProcessInfo) -> bool:
    """The training process's intra-op threads fit the machine's cores: its threads' waits for a CPU
    are the other load's doing, not its own oversubscription."""
    threads = main.threads.intra_op
    return threads is not None and threads <= max(1, run.environment.cpu.usable_cores)


def analyze_run(run: Run) -> RunAnalysis:
    ranks = tuple(analyze_rank(run, r) for r in run.ranks)
    if len(ranks) > 1:  # `pinchpoint run` captures the ranks of this machine
        ranks = tuple(replace(r, local_ranks=len(ranks)) for r in ranks)
    return RunAnalysis(run=run, ranks=ranks, no_steps=why_no_steps(run))
