"""GPU rules about the device's own work: Tensor Core use and memory near capacity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from pinchpoint.analysis.datasheet import gpu_peaks
from pinchpoint.analysis.gpu.kernels import kernel_function_name
from pinchpoint.analysis.gpu.tensor_cores import TensorCoreStatus
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, speedup_removing
from pinchpoint.diagnosis.rules.gpu_base import (
    MATRIX_UNIT_GAIN,
    MEMORY_PRESSURE_PEAK,
    MIN_SHARE,
)


def matrix_unit_ratio(
    device: str | None, measured: Mapping[str, float] | None, *, ampere: bool
) -> tuple[float, Fact]:
    """How much faster a matmul runs on the Tensor Cores than in fp32 SIMT on this device, and what the
    figure rests on: this machine's measured ceilings (`pinchpoint calibrate`), else the datasheet, else
    MATRIX_UNIT_GAIN (the conservative default)."""
    fast = "bfloat16" if ampere else "float16"
    if measured and measured.get("float32") and measured.get(fast):
        r = measured[fast] / measured["float32"]
        return r, Fact(
            "gpu.math.measured",
            dtype=fast,
            fast_flops=measured[fast],
            fp32_flops=measured["float32"],
            faster_x=r,
        )
    peaks = gpu_peaks(device)
    sheet = peaks.matmul_flops(fast) if peaks else None
    if peaks is not None and sheet:
        r = sheet / peaks.float32
        return r, Fact(
            "gpu.math.datasheet",
            device=peaks.name,
            dtype=fast,
            fast_flops=sheet,
            fp32_flops=peaks.float32,
            faster_x=r,
        )
    return MATRIX_UNIT_GAIN, Fact("gpu.math.assumed", faster_x=MATRIX_UNIT_GAIN)


class GpuTensorCores(Rule):
    """Pattern: GEMM/convolution kernels run on fp32 SIMT units of a GPU that has Tensor Cores.
    Why it's slow: Tensor Cores do the same math several times faster in TF32/bf16/fp16.
    Fix: autocast (bf16/fp16) or TF32 for fp32 matmuls on Ampere and newer.
    Reference: TensorBoard plugin "Tensor Cores eligible" recommendation; NVIDIA mixed-precision guide.
    """

    id: ClassVar[Category] = Category.COMPUTE_MATH
    title: ClassVar[str] = "Matrix math does not use the GPU's Tensor Cores"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank, run = s.timeline, s.devices
        tc, split = rank.tensor_cores, rank.split
        if split is None or tc.status not in (TensorCoreStatus.UNUSED, TensorCoreStatus.PARTIAL):
            return
        if tc.kernel_ns <= 0:
            return
        off_ns = tc.gemm_conv_ns - tc.matrix_unit_ns
        share = split.fractions["gpu_compute"] * off_ns / tc.kernel_ns
        if share < MIN_SHARE:
            return
        cc = tc.compute_capability
        ampere = cc is not None and cc >= (8, 0)
        ratio, basis = matrix_unit_ratio(tc.device, run.matmul_flops, ampere=ampere)
        gain = share * (1 - 1 / ratio)
        top = tc.top_off_matrix[0][0] if tc.top_off_matrix else ""
        evidence: list[Fact] = [
            Fact(
                "gpu.math.off_tensor_cores",
                gemm_share=tc.gemm_conv_share,
                off_share=1 - tc.matrix_unit_share,
                share=share,
            ),
            Fact("gpu.math.device", device=tc.device, capability=cc),
        ]
        if top:
            evidence.append(Fact("gpu.math.top_kernel", kernel=kernel_function_name(top)))
        evidence.append(basis)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=share,
            estimated_speedup=speedup_removing(gain),
            basis=Basis.MODEL,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("gpu.math.fix", ampere=ampere),
            snippet=Fact("gpu.math.snippet", ampere=ampere),
            ranks=(rank.rank,),
            fix_kind=FixKind.TF32 if ampere else None,  # the part of the fix `try` can apply
        )


class GpuMemoryPressure(Rule):
    """Pattern: peak reserved device memory near the device's capacity.
    Why it matters: no headroom for a larger batch; allocator retries and fragmentation; OOM risk.
    Fix: activation checkpointing, smaller batch with gradient accumulation, expandable segments.
    """

    id: ClassVar[Category] = Category.MEMORY_PRESSURE
    title: ClassVar[str] = "GPU memory is nearly full"
    scope: ClassVar[Scope] = Scope.DEVICE

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.timeline
        for dev in rank.memory.devices:
            if dev.peak_fraction is None or dev.peak_fraction < MEMORY_PRESSURE_PEAK:
                continue
            yield Finding(
                id=self.id,
                title=Fact("rule.title", name=self.title),
                share=0.0,
                estimated_speedup=1.0,
                basis=Basis.NONE,
                confidence=Confidence.MEDIUM,
                evidence=(
                    Fact(
                        "gpu.memory.peak",
                        device=dev.device,
                        peak_frac=dev.peak_fraction,
                        capacity_bytes=dev.capacity_bytes or 0,
                    ),
                ),
                fix=Fact("gpu.memory.fix"),
                ranks=(rank.rank,),
            )
            return
