"""GPU event classes (compute / communication / memory) and per-kernel stats on tiny synthetic tables."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pinchpoint.analysis.gpu.kernels import (
    NOT_GPU_WORK,
    GpuWork,
    classify,
    is_communication_kernel,
    kernel_breakdown,
    kernel_function_name,
)
from pinchpoint.trace.kineto import Kind, events_from_rows


@pytest.mark.parametrize(
    ("name", "comm"),
    [
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", True),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", True),
        ("void ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", True),
        ("rcclGenericKernel<1, false>", True),
        ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 8>(...)", True),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, ...)",
            True,
        ),
        ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, ...)", True),
        ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 16, 8>(float**, ...)", True),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, ...)", True),
        ("void vllm::cross_device_reduce_2stage<float, 4>(...)", True),
        ("nvshmemi_transfer_rma_kernel", True),
        ("void deep_ep::internode::dispatch<true, 8>(...)", True),
        # Compute: reductions, copies done by kernels, and an Allreduce in template arguments only.
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, Sum> >(...)", False),
        ("void flash::flash_fwd_kernel<Flash_fwd_traits<flash::Allreduce<4> > >(Flash_fwd_params)", False),
        ("void cub::DeviceReduceKernel<float>(float*)", False),
        ("void at::native::elementwise_kernel<128, 4, copy_kernel>(int, ...)", False),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_cublas", False),
        ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32", False),
        ("triton_poi_fused_add_mul_0", False),
    ],
)
def test_communication_names(name: str, comm: bool) -> None:
    assert is_communication_kernel(name) is comm


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("void at::native::foo<float, 4>(int, float*)", "at::native::foo"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
            "(anonymous)::multimem_all_reduce_kernel",
        ),
        (
            "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
            "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, int)",
            "vllm::fused_add_rms_norm_kernel",
        ),
        ("void at::native::f<(anonymous namespace)::Op<float> >(int)", "at::native::f"),
    ],
)
def test_kernel_function_name(name: str, fn: str) -> None:
    assert kernel_function_name(name) == fn


def row(kind: Kind, name: str, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    return {"kind": kind, "name": name, "start_ns": start, "dur_ns": dur, "stream": 7, "device": 0, **kw}


def test_classify_kinds() -> None:
    ev = events_from_rows(
        [
            row(Kind.KERNEL, "gemm", 0, 10),
            row(Kind.KERNEL, "ncclDevKernel_Generic", 1, 10),
            row(Kind.MEMCPY, "Memcpy HtoD (Pinned -> Device)", 2, 10),
            row(Kind.MEMSET, "Memset (Device)", 3, 10),
            row(Kind.RUNTIME, "cudaLaunchKernel", 4, 10),
            row(Kind.GPU_USER_ANNOTATION, "ProfilerStep#1", 5, 10),
            row(Kind.OTHER, "Stream Wait Event", 6, 10),
            row(Kind.OTHER, "Memcpy lookalike cuda_sync", 7, 10),
        ]
    )
    assert classify(ev).tolist() == [
        GpuWork.COMPUTE,
        GpuWork.COMMUNICATION,
        GpuWork.MEMORY,
        GpuWork.MEMORY,
        NOT_GPU_WORK,
        NOT_GPU_WORK,
        NOT_GPU_WORK,
        NOT_GPU_WORK,
    ]


def test_kernel_breakdown_stats_and_top_n() -> None:
    ev = events_from_rows(
        [
            row(Kind.KERNEL, "gemm", 0, 40),
            row(Kind.KERNEL, "gemm", 50, 60),
            row(Kind.KERNEL, "relu", 110, 5),
            row(Kind.KERNEL, "ncclDevKernel_Generic", 60, 30, stream=8),  # inside gemm #2: busy unchanged
            row(Kind.MEMCPY, "Memcpy DtoH (Device -> Pinned)", 200, 10),
            row(Kind.RUNTIME, "cudaLaunchKernel", 0, 1000),  # not GPU work: no effect
        ]
    )
    kb = kernel_breakdown(ev, top_n=2)
    assert kb.busy_ns == 40 + 60 + 5 + 10
    assert kb.event_count == 5
    assert kb.distinct_names == 4
    assert kb.total_ns == {GpuWork.COMPUTE: 105, GpuWork.COMMUNICATION: 30, GpuWork.MEMORY: 10}
    assert kb.count == {GpuWork.COMPUTE: 3, GpuWork.COMMUNICATION: 1, GpuWork.MEMORY: 1}
    gemm, nccl = kb.top
    assert (gemm.name, gemm.work, gemm.count, gemm.total_ns, gemm.max_ns) == (
        "gemm",
        GpuWork.COMPUTE,
        2,
        100,
        60,
    )
    assert gemm.mean_ns == 50.0
    assert gemm.share_of_busy == pytest.approx(100 / 115)
    assert (nccl.name, nccl.work, nccl.total_ns) == ("ncclDevKernel_Generic", GpuWork.COMMUNICATION, 30)
    assert (kb.rest_count, kb.rest_total_ns) == (2, 15)


def test_kernel_breakdown_empty() -> None:
    ev = events_from_rows([row(Kind.RUNTIME, "cudaLaunchKernel", 0, 10)])
    kb = kernel_breakdown(ev)
    assert kb.busy_ns == 0 and kb.top == () and kb.event_count == 0
    assert np.isclose(sum(kb.total_ns.values()), 0)
