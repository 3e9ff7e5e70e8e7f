"""What the device-timeline rules share: thresholds, step-time helpers.

Shares are fractions of the steps' wall time (the device-aligned steps; the GPU-activity span when a
trace has no steps), measured so that the shares of different findings do not count the same instant
twice: input wait and other GPU idle come from `StepTimeSplit`, which labels each instant once.
Thresholds follow the TF/XProf input-pipeline analyzer's two levels (5% moderate, 20% high) unless
noted; see `../shared/research/rules-catalog.md`.
"""

from __future__ import annotations

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis
from pinchpoint.diagnosis.finding import Confidence

MIN_SHARE = 0.05
"""A cause below 5% of the step is not reported (XProf's "moderately bound" level)."""
HIGH_SHARE = 0.20
"""At 20% and above a cause is "highly" bound: confidence high."""
LOADER_OPS_PREPROCESS = 0.25
"""Framework ops cover at least this much of the DataLoader wait: the loader computes (transforms)."""
MATRIX_UNIT_GAIN = 2.0
"""Conservative speed-up of GEMM/convolution kernels moved from fp32 SIMT to Tensor Cores (TF32 or
bf16/fp16 AMP): NVIDIA lists 2-8x for these paths on V100/A100; we take the low end."""
MEMORY_PRESSURE_PEAK = 0.90
"""Peak reserved memory at 90% of the device's capacity leaves no room for a larger batch."""


def window_ns(rank: GpuRankAnalysis) -> int:
    return rank.split.window_ns if rank.split is not None else 0


def per_step(rank: GpuRankAnalysis, share: float) -> tuple[float, bool]:
    """A share of the window as time: (ns per step, True) over the device-aligned steps, else
    (ns over the whole GPU-activity span, False)."""
    n = len(rank.steps.steps)
    if n and rank.split is not None:
        return share * rank.split.window_ns / n, True
    return share * window_ns(rank), False


def confidence_for(share: float) -> Confidence:
    return Confidence.HIGH if share >= HIGH_SHARE else Confidence.MEDIUM
