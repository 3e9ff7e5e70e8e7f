"""GPU rules about the device's own work: Tensor Core use and memory near capacity."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import ClassVar

from pinchpoint.analysis.datasheet import gpu_peaks
from pinchpoint.analysis.gpu.kernels import kernel_function_name
from pinchpoint.analysis.gpu.tensor_cores import TensorCoreStatus
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import Rule, Scope, Subject, pct, speedup_removing
from pinchpoint.diagnosis.rules.gpu_base import (
    MATRIX_UNIT_GAIN,
    MEMORY_PRESSURE_PEAK,
    MIN_SHARE,
)


def matrix_unit_ratio(
    device: str | None, measured: Mapping[str, float] | None, *, ampere: bool
) -> tuple[float, str]:
    """How much faster a matmul runs on the Tensor Cores than in fp32 SIMT on this device, and what the
    figure rests on: this machine's measured ceilings (`pinchpoint calibrate`), else the datasheet, else
    MATRIX_UNIT_GAIN (the conservative default)."""
    fast = "bfloat16" if ampere else "float16"
    if measured and measured.get("float32") and measured.get(fast):
        r = measured[fast] / measured["float32"]
        return r, (
            f"Measured here (pinchpoint calibrate): {fast} matmul {measured[fast] / 1e12:.0f} TFLOP/s vs "
            f"fp32 {measured['float32'] / 1e12:.1f} TFLOP/s ({r:.1f}x)"
        )
    peaks = gpu_peaks(device)
    sheet = peaks.matmul_flops(fast) if peaks else None
    if peaks is not None and sheet:
        r = sheet / peaks.float32
        return r, (
            f"Datasheet ({peaks.name}): {fast} Tensor Cores {sheet / 1e12:.0f} TFLOP/s vs fp32 "
            f"{peaks.float32 / 1e12:.1f} TFLOP/s ({r:.1f}x; run `pinchpoint calibrate` on it to measure)"
        )
    return MATRIX_UNIT_GAIN, (
        f"Estimate assumes Tensor Core matmuls {MATRIX_UNIT_GAIN:.0f}x faster (device not in the "
        "datasheet table; `pinchpoint calibrate` measures it)"
    )


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
        evidence = [
            f"GEMM/convolution kernels are {pct(tc.gemm_conv_share)} of kernel time; "
            f"{pct(1 - tc.matrix_unit_share)} of that runs off the Tensor Cores ({pct(share)} of the step time)",
            f"{tc.device or 'GPU'} (compute capability {cc[0]}.{cc[1]})" if cc else f"{tc.device or 'GPU'}",
        ]
        if top:
            evidence.append(f"Heaviest off-Tensor-Core kernel: {kernel_function_name(top)[:90]}")
        evidence.append(basis)
        yield Finding(
            id=self.id,
            title=self.title,
            share=share,
            estimated_speedup=speedup_removing(gain),
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix="Run the model under autocast (bf16 on Ampere and newer, fp16 with a GradScaler on Volta/Turing)"
            + ("; for fp32 matmuls that must stay fp32, allow TF32." if ampere else "."),
            snippet=(
                "with torch.autocast('cuda', dtype=torch.bfloat16):\n    loss = model(x)\n"
                "torch.backends.cuda.matmul.allow_tf32 = True   # fp32 matmuls left outside autocast"
                if ampere
                else "scaler = torch.cuda.amp.GradScaler()\nwith torch.autocast('cuda', dtype=torch.float16):\n"
                "    loss = model(x)\nscaler.scale(loss).backward(); scaler.step(opt); scaler.update()"
            ),
            ranks=(rank.rank,),
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
                title=self.title,
                share=0.0,
                estimated_speedup=1.0,
                confidence=Confidence.MEDIUM,
                evidence=(
                    f"Device {dev.device} peaks at {pct(dev.peak_fraction)} of its "
                    f"{(dev.capacity_bytes or 0) / 2**30:.0f} GiB",
                ),
                fix="Make room: activation checkpointing, gradient accumulation with a smaller micro-batch, "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation.",
                ranks=(rank.rank,),
            )
            return
