"""Tensor Core (NVIDIA) / Matrix Core (AMD MFMA) use, read from kernel names against the device.

A trace has no hardware counters, but library kernel names say which instruction path a GEMM or
convolution took:

- matrix-unit paths: an MMA shape after a precision letter (`volta_h884cudnn`, `volta_s884gemm`,
  `turing_fp16_s1688gemm`, `ampere_s16816gemm`: 8x8x4 / 16x8x8 / 16x8x16 tiles exist only as Tensor Core
  instructions, whatever the accumulate letter), `hmma`, `imma`, `xmma`, `gmma`/`wgmma`, `tensorop`,
  `tf32`, cuBLASLt's `nvjet`, flash attention (`flash_fwd`, `fmha`), fp16/bf16 GEMMs; AMD: `MFMA`,
  Composable Kernel `xdlops`, Tensile `Cijk_..._MI16x16x1_...` (the MI field names the matrix instruction);
- SIMT paths: fp32 `sgemm` (`volta_sgemm_128x64_nn`), `scudnn` (`volta_scudnn_128x64_relu_...`),
  cuDNN's `implicit_convolve_sgemm`, `dgrad_engine<float,...>`, `wgrad_alg0_engine<float,...>`, Winograd,
  CUTLASS `simt`, cuBLAS xmma kernels with an `ffma` field, Tensile `Cijk_*` without an `MI` field. Bare `cutlass` is not a GEMM marker: it appears
  in the template arguments of non-GEMM kernels (a B200 MoE `finalizeKernel<cutlass::bfloat16_t>`).

GEMM/convolution time off the matrix units on a device that has them (compute capability ≥ 7.0, AMD
CDNA) is precision left on the table: the `compute.math` fix is AMP (bf16/fp16 autocast) or TF32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np

from pinchpoint.analysis.gpu._common import kind_mask
from pinchpoint.trace.kineto import DeviceInfo, Kind, KinetoTrace

GEMM_CONV = re.compile(
    r"gemm|convol|conv[123]d|fprop|dgrad|wgrad|winograd|[shi]cudnn|\d{3,6}cudnn|xmma|cijk_|nvjet"
    r"|gmma|hmma|imma|mfma|tensorop|fmha|flash_(?:fwd|bwd)|matmul"
)
MATRIX_UNIT = re.compile(
    r"(?:^|_)[hsi](?:884|1688|16816|16832|161616|8816)|hmma|imma|xmma|gmma|tensorop|tf32|nvjet|mfma|xdl"
    r"|^cijk_.*_mi\d+x\d+x\d+"
    r"|fmha|flash_(?:fwd|bwd)|bf16|fp16|f16|half"
)
SIMT = re.compile(r"simt|sgemm|scudnn|dgemm")
"""Marks a kernel as SIMT even where a precision word matches MATRIX_UNIT (e.g. CUTLASS `simt_hgemm`)."""
FFMA = re.compile(r"(?:^|_)ffma(?:_|$)")
"""cuBLAS's fp32 kernels built on the xmma framework name their scalar FMA path: on an H200 an fp32
matmul with TF32 off ran `sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_..._ffma_aligna4_...`, plain SIMT."""
MOSTLY_USED = 0.9
"""Status USED when ≥ 90% of GEMM/conv time is on the matrix units."""


class TensorCoreStatus(Enum):
    USED = "used"
    PARTIAL = "partial"
    UNUSED = "unused"
    NO_GEMM = "no_gemm"
    """No GEMM/convolution kernels in the trace."""
    UNSUPPORTED = "unsupported"
    """The device has no matrix units (compute capability < 7.0)."""
    UNKNOWN = "unknown"
    """The device's support cannot be told from the trace (no device properties, unknown AMD part)."""


def is_gemm_conv(name: str) -> bool:
    return GEMM_CONV.search(name.lower()) is not None


def on_matrix_units(name: str) -> bool:
    """For a GEMM/conv kernel: does its name indicate the Tensor Core / MFMA path?"""
    n = name.lower()
    if MATRIX_UNIT.search(n) is None or FFMA.search(n) is not None:
        return False
    # A SIMT marker wins unless the name also has an explicit MMA instruction or tile shape.
    strong = re.search(r"(?:^|_)[hsi](?:884|1688|16816|16832|161616|8816)|mma|tensorop|nvjet|gmma|xdl", n)
    return SIMT.search(n) is None or strong is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorCoreUse:
    status: TensorCoreStatus
    supported: bool | None
    """Whether the device has matrix units; None when it cannot be told."""
    device: str | None
    compute_capability: tuple[int, int] | None
    kernel_ns: int
    """All kernel time."""
    gemm_conv_ns: int
    """GEMM/convolution kernel time: what could run on the matrix units ('TC-eligible')."""
    matrix_unit_ns: int
    """GEMM/conv kernel time on the matrix units."""
    gemm_conv_share: float
    """`gemm_conv_ns` over kernel time."""
    matrix_unit_share: float
    """Matrix-unit time over GEMM/conv time (0 when there is none)."""
    off_matrix_share: float
    """GEMM/conv time not on the matrix units over GEMM/conv time."""
    top_off_matrix: tuple[tuple[str, int], ...]
    """The (kernel name, time) pairs with the most GEMM/conv time off the matrix units, at most 5."""


def device_support(dev: DeviceInfo | None) -> bool | None:
    if dev is None:
        return None
    if dev.compute_capability is not None:
        return dev.compute_capability >= (7, 0)
    name = dev.name.lower()
    if dev.vendor == "amd" or "amd" in name or "instinct" in name:
        if re.search(r"mi\s?(100|2\d\d|3\d\d)|gfx9(08|0a|4)", name):
            return True
        return None
    return None


def tensor_core_use(trace: KinetoTrace) -> TensorCoreUse:
    ev = trace.events
    rows = np.flatnonzero(kind_mask(ev, Kind.KERNEL))
    time_by_name = np.zeros(len(ev.names), dtype=np.int64)
    np.add.at(time_by_name, ev.name[rows], ev.dur_ns[rows])
    used = np.flatnonzero(time_by_name > 0)
    gemm = [int(i) for i in used if is_gemm_conv(ev.names[i])]
    on = [i for i in gemm if on_matrix_units(ev.names[i])]
    on_set = set(on)
    off = sorted((i for i in gemm if i not in on_set), key=lambda i: -int(time_by_name[i]))

    kernel_ns = int(ev.dur_ns[rows].sum())
    gemm_ns = int(time_by_name[gemm].sum()) if gemm else 0
    on_ns = int(time_by_name[on].sum()) if on else 0
    devs = [d for d in trace.meta.devices if int(d.index) in set(np.unique(ev.device[rows]).tolist())]
    dev = devs[0] if devs else (trace.meta.devices[0] if trace.meta.devices else None)
    supported = device_support(dev)
    if supported is None and on_ns > 0:
        supported = True  # the kernels ran on matrix units, so the device has them
    return TensorCoreUse(
        status=_status(supported, gemm_ns, on_ns),
        supported=supported,
        device=dev.name if dev else None,
        compute_capability=dev.compute_capability if dev else None,
        kernel_ns=kernel_ns,
        gemm_conv_ns=gemm_ns,
        matrix_unit_ns=on_ns,
        gemm_conv_share=gemm_ns / kernel_ns if kernel_ns else 0.0,
        matrix_unit_share=on_ns / gemm_ns if gemm_ns else 0.0,
        off_matrix_share=(gemm_ns - on_ns) / gemm_ns if gemm_ns else 0.0,
        top_off_matrix=tuple((ev.names[i], int(time_by_name[i])) for i in off[:5]),
    )


def _status(supported: bool | None, gemm_ns: int, on_ns: int) -> TensorCoreStatus:
    if gemm_ns == 0:
        return TensorCoreStatus.NO_GEMM
    if supported is False:
        return TensorCoreStatus.UNSUPPORTED
    if supported is None:
        return TensorCoreStatus.UNKNOWN
    if on_ns >= MOSTLY_USED * gemm_ns:
        return TensorCoreStatus.USED
    return TensorCoreStatus.PARTIAL if on_ns > 0 else TensorCoreStatus.UNUSED
