"""Every rule, in one explicit tuple (a test keeps each (scope, id) unique), and which source decides a
category when both a run's recordings and a device timeline judged it."""

from __future__ import annotations

from pinchpoint.diagnosis.finding import Category
from pinchpoint.diagnosis.rules.base import Rule
from pinchpoint.diagnosis.rules.comm import CommExposed
from pinchpoint.diagnosis.rules.compile import CompileTime, GraphBreaks, Recompiles
from pinchpoint.diagnosis.rules.compute import ComputeMath, ComputeMemory
from pinchpoint.diagnosis.rules.cpu import CpuOversubscription, CpuUnderuse
from pinchpoint.diagnosis.rules.gc import HostGc
from pinchpoint.diagnosis.rules.generation import Recompute as GenerationRecompute
from pinchpoint.diagnosis.rules.gpu_compile import TraceGraphBreaks, TraceRecompiles
from pinchpoint.diagnosis.rules.gpu_device import GpuMemoryPressure, GpuTensorCores
from pinchpoint.diagnosis.rules.gpu_host import GpuHostBound, GpuHostToDevice, GpuInputWait, GpuSync
from pinchpoint.diagnosis.rules.gpu_ranks import GpuCommExposed, GpuStraggler
from pinchpoint.diagnosis.rules.host import HostDispatch, HostPython
from pinchpoint.diagnosis.rules.input import InputFetch, InputPreprocess
from pinchpoint.diagnosis.rules.io import IoCheckpoint
from pinchpoint.diagnosis.rules.memory import AllocatorChurn, MemoryLeak
from pinchpoint.diagnosis.rules.outside import OUTSIDE_RULES
from pinchpoint.diagnosis.rules.pipeline import PipelineBubble
from pinchpoint.diagnosis.rules.ranks import Straggler
from pinchpoint.diagnosis.rules.restarts import WorkerRestart
from pinchpoint.diagnosis.rules.run import Evaluation, Rollouts, StartUp
from pinchpoint.diagnosis.rules.serving import Batching as ServeBatching
from pinchpoint.diagnosis.rules.stalled import StalledRun
from pinchpoint.diagnosis.rules.tensor_parallel import TensorParallelComm

RULES: tuple[Rule, ...] = (
    # One rank's recordings (Scope.RANK)
    InputFetch(),
    InputPreprocess(),
    WorkerRestart(),
    HostPython(),
    HostDispatch(),
    HostGc(),
    ComputeMath(),
    ComputeMemory(),
    CpuOversubscription(),
    CpuUnderuse(),
    IoCheckpoint(),
    MemoryLeak(),
    AllocatorChurn(),
    Rollouts(),
    Evaluation(),
    StartUp(),
    Recompiles(),
    GraphBreaks(),
    CompileTime(),
    GenerationRecompute(),
    ServeBatching(),
    # Every rank's recordings (Scope.RANKS)
    StalledRun(),
    Straggler(),
    CommExposed(),
    PipelineBubble(),
    TensorParallelComm(),
    # One rank's device timeline (Scope.DEVICE)
    GpuInputWait(),
    GpuHostBound(),
    GpuSync(),
    GpuHostToDevice(),
    GpuTensorCores(),
    GpuCommExposed(),
    GpuStraggler(),
    GpuMemoryPressure(),
    TraceRecompiles(),
    TraceGraphBreaks(),
    # A process watched from outside (Scope.OUTSIDE)
    *OUTSIDE_RULES,
)

DEVICE_OWNS: frozenset[Category] = frozenset(
    {
        Category.INPUT_FETCH,
        Category.INPUT_PREPROCESS,
        Category.HOST_PYTHON,
        Category.HOST_DISPATCH,
        Category.HOST_SYNC,
        Category.TRANSFER_H2D,
        Category.COMPUTE_MATH,
        Category.COMPUTE_MEMORY,
        Category.COMM_EXPOSED,
        Category.IMBALANCE_STRAGGLER,
    }
)
"""Precedence: on a CUDA program the host only enqueues work, so its phases say little about what limits
a step. When a job has device timelines as well as recordings, these categories are judged on the
device timeline; the recordings' findings in them only say why (an input finding's loader verdict).
Host-level categories (memory, threads, checkpoints) stay with the recordings' rules."""
