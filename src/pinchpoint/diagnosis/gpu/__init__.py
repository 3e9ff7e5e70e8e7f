"""Rules over a profiler trace's GPU analyses (`pinchpoint analyze`, and the op window of a CUDA
`pinchpoint run`), in the categories of DESIGN.md.

Shares are fractions of the steps' wall time (the device-aligned steps; the GPU-activity span when a
trace has no steps), measured so that the shares of different findings do not count the same instant
twice: input wait and other GPU idle come from `StepTimeSplit`, which labels each instant once.
Thresholds follow the TF/XProf input-pipeline analyzer's two levels (5% moderate, 20% high) unless
noted; see `../shared/research/rules-catalog.md`.
"""

from __future__ import annotations

from pinchpoint.diagnosis.gpu.base import (
    HIGH_SHARE,
    LOADER_OPS_PREPROCESS,
    MATRIX_UNIT_GAIN,
    MEMORY_PRESSURE_PEAK,
    MIN_SHARE,
    GpuRule,
)
from pinchpoint.diagnosis.gpu.device import GpuMemoryPressure, GpuTensorCores
from pinchpoint.diagnosis.gpu.host import GpuHostBound, GpuHostToDevice, GpuInputWait, GpuSync
from pinchpoint.diagnosis.gpu.ranks import GpuCommExposed, GpuStraggler

GPU_RULES: tuple[GpuRule, ...] = (
    GpuInputWait(),
    GpuHostBound(),
    GpuSync(),
    GpuHostToDevice(),
    GpuTensorCores(),
    GpuCommExposed(),
    GpuStraggler(),
    GpuMemoryPressure(),
)

__all__ = [
    "GPU_RULES",
    "HIGH_SHARE",
    "LOADER_OPS_PREPROCESS",
    "MATRIX_UNIT_GAIN",
    "MEMORY_PRESSURE_PEAK",
    "MIN_SHARE",
    "GpuRule",
]
