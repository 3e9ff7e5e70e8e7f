"""Vendor datasheet peaks for common GPUs: the fallback when nothing was measured, and the yardstick
`pinchpoint calibrate` prints its measurements against.

Dense figures (Hopper datasheets quote TF32/BF16/FP8 with sparsity: halved here), in FLOP/s and
bytes/s. Source: the vendors' datasheets as collected in the project's research notes
(rules-catalog §8). Measured ceilings are typically ~80-90% of these.
"""

from __future__ import annotations

from dataclasses import dataclass

T = 1e12


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPeaks:
    name: str
    float32: float
    tf32: float | None
    bfloat16: float | None
    float16: float
    memory_bytes_per_s: float

    def matmul_flops(self, dtype: str) -> float | None:
        return {
            "float32": self.float32,
            "tf32": self.tf32,
            "bfloat16": self.bfloat16,
            "float16": self.float16,
        }.get(dtype)


# Order matters: the first whose every token appears in the device name wins (longest names first).
_PEAKS: tuple[tuple[tuple[str, ...], GpuPeaks], ...] = (
    (
        ("h200", "nvl"),
        GpuPeaks(
            name="H200 NVL",
            float32=60 * T,
            tf32=417.5 * T,
            bfloat16=835.5 * T,
            float16=835.5 * T,
            memory_bytes_per_s=4.8 * T,
        ),
    ),
    (
        ("h200",),
        GpuPeaks(
            name="H200 SXM",
            float32=66.9 * T,
            tf32=494.7 * T,
            bfloat16=989.4 * T,
            float16=989.4 * T,
            memory_bytes_per_s=4.8 * T,
        ),
    ),
    (
        ("h100", "pcie"),
        GpuPeaks(
            name="H100 PCIe",
            float32=51.2 * T,
            tf32=378 * T,
            bfloat16=756 * T,
            float16=756 * T,
            memory_bytes_per_s=2.0 * T,
        ),
    ),
    (
        ("h100",),
        GpuPeaks(
            name="H100 SXM5",
            float32=66.9 * T,
            tf32=494.7 * T,
            bfloat16=989.4 * T,
            float16=989.4 * T,
            memory_bytes_per_s=3.35 * T,
        ),
    ),
    (
        ("a100", "40gb"),
        GpuPeaks(
            name="A100 40GB",
            float32=19.5 * T,
            tf32=156 * T,
            bfloat16=312 * T,
            float16=312 * T,
            memory_bytes_per_s=1.555 * T,
        ),
    ),
    (
        ("a100", "pcie"),
        GpuPeaks(
            name="A100 PCIe 80GB",
            float32=19.5 * T,
            tf32=156 * T,
            bfloat16=312 * T,
            float16=312 * T,
            memory_bytes_per_s=1.935 * T,
        ),
    ),
    (
        ("a100",),
        GpuPeaks(
            name="A100 SXM4 80GB",
            float32=19.5 * T,
            tf32=156 * T,
            bfloat16=312 * T,
            float16=312 * T,
            memory_bytes_per_s=2.039 * T,
        ),
    ),
    (
        ("v100",),
        GpuPeaks(
            name="V100 SXM2",
            float32=15.7 * T,
            tf32=None,
            bfloat16=None,
            float16=125 * T,
            memory_bytes_per_s=0.9 * T,
        ),
    ),
)


def gpu_peaks(device_name: str | None) -> GpuPeaks | None:
    """Datasheet peaks for a device name as CUDA reports it ('NVIDIA H200', 'NVIDIA A100-SXM4-40GB')."""
    if not device_name:
        return None
    name = device_name.lower()
    for tokens, peaks in _PEAKS:
        if all(t in name for t in tokens):
            return peaks
    return None
