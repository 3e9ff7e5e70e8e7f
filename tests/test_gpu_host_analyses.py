"""Host-side GPU analyses (steps, launch, memcpy, sync, memory, tensor cores, ranks) on tiny synthetic
traces whose answers are worked out by hand in the comments. Times are plain integer nanoseconds."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pinchpoint.analysis.gpu.launch import launch_stats
from pinchpoint.analysis.gpu.memcpy import memcpy_stats
from pinchpoint.analysis.gpu.memory import MAX_POINTS, memory_stats
from pinchpoint.analysis.gpu.ranks import compare_ranks
from pinchpoint.analysis.gpu.steps import step_stats
from pinchpoint.analysis.gpu.sync import NO_OP, sync_stats
from pinchpoint.analysis.gpu.tensor_cores import (
    TensorCoreStatus,
    is_gemm_conv,
    on_matrix_units,
    tensor_core_use,
)
from pinchpoint.trace.kineto import (
    CopyKind,
    DeviceInfo,
    HostMemory,
    Kind,
    KinetoTrace,
    MemoryTable,
    TraceMeta,
    empty_memory,
    events_from_rows,
)

HOST = {"pid": 1, "tid": 1}
GPU = {"pid": 0, "tid": 7, "device": 0, "stream": 7}


def make(
    rows: list[dict[str, Any]],
    memory: MemoryTable | None = None,
    devices: tuple[DeviceInfo, ...] = (),
    rank: int = 0,
) -> KinetoTrace:
    return KinetoTrace(
        meta=TraceMeta(path="synthetic", rank=rank, devices=devices),
        events=events_from_rows(rows),
        memory=memory if memory is not None else empty_memory(),
    )


def ev(kind: Kind, name: str, start: int, dur: int, **kw: Any) -> dict[str, Any]:
    base = GPU if kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET) else HOST
    return {**base, "kind": kind, "name": name, "start_ns": start, "dur_ns": dur, **kw}


def kernel(start: int, dur: int, name: str = "k", **kw: Any) -> dict[str, Any]:
    return ev(Kind.KERNEL, name, start, dur, **kw)


# --- steps ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("annotation_kind", [Kind.USER_ANNOTATION, Kind.CPU_OP])  # current and 2021 schema
def test_steps_dataloader_wait_and_exposed_part(annotation_kind: Kind) -> None:
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    t = make(
        [
            ev(annotation_kind, "ProfilerStep#3", 0, 100),
            ev(annotation_kind, "ProfilerStep#4", 100, 100),
            ev(annotation_kind, loader, 0, 40),
            ev(annotation_kind, loader, 100, 10),
            kernel(20, 40),  # [20, 60)
            kernel(105, 95),  # [105, 200)
        ]
    )
    s = step_stats(t)
    assert [x.number for x in s.steps] == [3, 4]
    # Step 3: GPU busy [20,60) = 40; loader [0,40) = 40, of which [0,20) has the GPU idle = 20.
    # Step 4: GPU busy [105,200) = 95; loader [100,110) = 10, exposed [100,105) = 5.
    assert [(x.gpu_busy_ns, x.dataloader_ns, x.dataloader_exposed_ns) for x in s.steps] == [
        (40, 40, 20),
        (95, 10, 5),
    ]
    assert s.dataloader_share == pytest.approx(50 / 200)
    assert s.dataloader_exposed_share == pytest.approx(25 / 200)
    assert s.gpu_busy_fraction == pytest.approx(135 / 200)
    assert s.median_dataloader_share == pytest.approx((0.4 + 0.1) / 2)
    assert s.median_step_ns == 100 and s.note is None and s.dataloader_ranges == 2


def test_no_steps_says_so() -> None:
    s = step_stats(make([kernel(0, 10), ev(Kind.CPU_OP, "aten::mm", 0, 5)]))
    assert not s.has_steps and s.note is not None and "ProfilerStep" in s.note


def test_steps_without_dataloader_note_it() -> None:
    s = step_stats(make([ev(Kind.USER_ANNOTATION, "ProfilerStep#0", 0, 10)]))
    assert s.has_steps and s.dataloader_share == 0 and s.note is not None and "DataLoader" in s.note


# --- launch --------------------------------------------------------------------------------------------


def _launch_rows(kernel_dur: int = 0) -> list[dict[str, Any]]:
    rows = [
        ev(Kind.RUNTIME, "cudaLaunchKernel", 0, 10, correlation=1),
        ev(Kind.RUNTIME, "cudaLaunchKernel", 10, 10, correlation=2),
        ev(Kind.RUNTIME, "cudaGraphLaunch", 20, 10, correlation=3),
        kernel(15, 5, correlation=1),  # delay 15, shorter than its 10 ns launch
        kernel(25, 30, correlation=2),  # delay 15
        kernel(60, 4, correlation=3),  # graph: cost 10 / 2 kernels = 5 each; 4 < 5 is short
        kernel(64, 6, correlation=3),  # 6 >= 5 is not
        kernel(100, 7),  # no launch found
    ]
    if kernel_dur:
        rows.append(kernel(0, kernel_dur, name="big"))
    return rows


def test_launch_join_delay_and_short_kernels() -> None:
    s = launch_stats(make(_launch_rows()))
    assert (s.kernels, s.kernels_joined, s.launch_calls) == (5, 4, 3)
    assert s.launch_delay.median_ns == pytest.approx(27.5)  # delays 15, 15, 40, 44
    assert s.launch_delay.max_ns == 44
    assert s.launch_call.median_ns == 10
    assert s.kernel.median_ns == 6  # 4, 5, 6, 7, 30
    assert (s.short_kernels, s.short_kernel_share) == (2, 0.5)
    assert s.tiny_kernels == 5 and s.tiny_kernel_time_share == 1.0
    # Window [0, 30): GPU busy [15,20) + [25,30) = 10 → 1/3; the thread is in launch calls throughout.
    assert s.window_ns == 30 and s.gpu_busy_fraction == pytest.approx(1 / 3)
    assert s.host_busy_fraction == 1.0 and s.launch_bound
    assert s.kernels_per_step is None


def test_not_launch_bound_when_gpu_stays_busy() -> None:
    s = launch_stats(make(_launch_rows(kernel_dur=50_000)))
    assert s.gpu_busy_fraction == 1.0 and not s.launch_bound
    assert s.tiny_kernel_time_share == pytest.approx(52 / 50_052)


def test_kernels_per_step_counts_by_launch_time() -> None:
    rows = [*_launch_rows(), ev(Kind.USER_ANNOTATION, "ProfilerStep#1", 0, 20)]
    # Launches at 0 and 10 fall in the step; the graph launch at 20 and the unjoined kernel (100) do not.
    assert launch_stats(make(rows)).kernels_per_step == 2


# --- memcpy --------------------------------------------------------------------------------------------


def _copy(start: int, dur: int, kind: CopyKind, mem: HostMemory, nbytes: int, corr: int) -> dict[str, Any]:
    return ev(
        Kind.MEMCPY, "Memcpy", start, dur, copy_kind=kind, host_memory=mem, bytes=nbytes, correlation=corr
    )


def _copy_rows() -> list[dict[str, Any]]:
    return [
        ev(Kind.RUNTIME, "cudaMemcpyAsync", 0, 100, correlation=1),
        _copy(10, 90, CopyKind.H2D, HostMemory.PAGEABLE, 90_000, 1),  # pageable > 64 KB: blocks
        ev(Kind.RUNTIME, "cudaMemcpyAsync", 200, 10, correlation=2),
        _copy(220, 40, CopyKind.D2H, HostMemory.PINNED, 4000, 2),  # async: the call returned first
        kernel(230, 20),  # hides [230, 250) of the D2H copy
        ev(Kind.RUNTIME, "cudaMemcpy", 300, 50, correlation=3),
        _copy(300, 40, CopyKind.D2D, HostMemory.UNKNOWN, 80_000, 3),  # synchronous by name
        ev(Kind.RUNTIME, "cudaMemcpy", 400, 20, correlation=4),
        _copy(405, 5, CopyKind.H2D, HostMemory.UNKNOWN, 1000, 4),  # small H2D: staged, not counted
    ]


def test_memcpy_directions_bandwidth_sync_and_exposed() -> None:
    s = memcpy_stats(make(_copy_rows()))
    h2d, d2h, d2d = (s.direction(k) for k in (CopyKind.H2D, CopyKind.D2H, CopyKind.D2D))
    assert h2d is not None and d2h is not None and d2d is not None
    assert (h2d.count, h2d.bytes, h2d.time_ns, h2d.pageable, h2d.exposed_ns) == (2, 91_000, 95, 1, 95)
    assert h2d.bandwidth_gbps == pytest.approx(91_000 / 95)
    assert (d2h.count, d2h.pinned, d2h.exposed_ns, d2h.bandwidth_gbps) == (1, 1, 20, 100.0)
    assert d2d.exposed_ns == 40
    assert (s.copies, s.time_ns, s.exposed_ns) == (4, 175, 155)
    assert (s.sync_copies, s.sync_host_ns) == (2, 150)
    assert s.pageable_async == 1 and s.unjoined == 0


# --- sync ----------------------------------------------------------------------------------------------


def test_sync_points_and_the_ops_they_happen_under() -> None:
    t = make(
        [
            ev(Kind.USER_ANNOTATION, "ProfilerStep#0", 0, 300),
            ev(Kind.CPU_OP, "aten::item", 0, 100, external_id=1),
            ev(Kind.CPU_OP, "aten::_local_scalar_dense", 5, 90, external_id=2),
            ev(Kind.RUNTIME, "cudaMemcpyAsync", 10, 40, external_id=2, correlation=7),
            _copy(40, 10, CopyKind.D2H, HostMemory.PINNED, 4, 7),  # the call waits for it: blocking
            ev(Kind.RUNTIME, "cudaStreamSynchronize", 50, 40, external_id=2),
            ev(Kind.CPU_OP, "aten::nonzero", 120, 50, external_id=3),
            ev(Kind.RUNTIME, "cudaStreamSynchronize", 130, 10),  # no external id: found by containment
            ev(Kind.RUNTIME, "cudaDeviceSynchronize", 200, 30),  # outside any op
            ev(Kind.RUNTIME, "cudaStreamWaitEvent", 240, 5),  # device-side wait: not a host sync
        ]
    )
    s = sync_stats(t)
    assert (s.calls, s.calls_ns, s.sync_copies, s.sync_copy_ns, s.blocked_ns) == (3, 80, 1, 40, 120)
    assert [(a.name, a.count, a.total_ns) for a in s.by_api] == [
        ("cudaStreamSynchronize", 2, 50),
        ("cudaMemcpyAsync", 1, 40),
        ("cudaDeviceSynchronize", 1, 30),
    ]
    assert [(x.op, x.inner_op, x.count, x.total_ns) for x in s.sites] == [
        ("aten::item", "aten::_local_scalar_dense", 2, 80),
        (NO_OP, NO_OP, 1, 30),
        ("aten::nonzero", "aten::nonzero", 1, 10),
    ]
    assert s.calls_per_step == 4 and s.blocked_step_share == pytest.approx(120 / 300)


# --- memory --------------------------------------------------------------------------------------------


def _mem(t: list[int], delta: list[int], alloc: list[int], reserved: list[int]) -> MemoryTable:
    n = len(t)
    return MemoryTable(
        t_ns=np.array(t, dtype=np.int64),
        bytes_delta=np.array(delta, dtype=np.int64),
        total_allocated=np.array(alloc, dtype=np.int64),
        total_reserved=np.array(reserved, dtype=np.int64),
        device_type=np.ones(n, dtype=np.int8),
        device_id=np.zeros(n, dtype=np.int32),
    )


def test_memory_peak_capacity_and_growth_per_step() -> None:
    steps = [ev(Kind.USER_ANNOTATION, f"ProfilerStep#{i}", 100 * i, 100) for i in range(4)]
    # Allocated at each step end (t = 100, 200, 300, 400): 100, 300, 500, 700 → slope 200 bytes/step.
    mem = _mem(
        [50, 100, 150, 200, 300, 400],
        [100, 0, 300, -100, 200, 200],
        [100, 100, 400, 300, 500, 700],
        [200, 200, 500, 500, 800, 800],
    )
    dev = DeviceInfo(index=0, name="Tesla V100", compute_capability=(7, 0), total_memory_bytes=1000)
    s = memory_stats(make(steps, memory=mem, devices=(dev,)))
    (d,) = s.devices
    assert d.absolute and (d.peak_allocated_bytes, d.peak_reserved_bytes) == (700, 800)
    assert d.peak_fraction == pytest.approx(0.8)
    assert d.step_end_allocated == (100, 300, 500, 700)
    assert d.growth_bytes_per_step == pytest.approx(200)
    assert d.timeline_allocated[-1] == 700 and max(d.timeline_reserved) == 800


def test_memory_2021_schema_rebuilds_from_deltas() -> None:
    mem = _mem([0, 1, 2, 3], [-100, 300, -50, 20], [-1] * 4, [-1] * 4)
    (d,) = memory_stats(make([], memory=mem)).devices
    # Running sum -100, 200, 150, 170; lifted by 100 so the lowest point is 0: peak 300 above it.
    assert not d.absolute and d.peak_allocated_bytes == 300 and d.peak_reserved_bytes is None
    assert d.peak_fraction is None and d.growth_bytes_per_step is None


def test_memory_timeline_is_downsampled_keeping_the_peak() -> None:
    n = 5000
    alloc = np.arange(n) % 97
    alloc[1234] = 10_000
    mem = _mem(list(range(n)), [0] * n, alloc.tolist(), alloc.tolist())
    (d,) = memory_stats(make([], memory=mem)).devices
    assert len(d.timeline_ns) <= MAX_POINTS and max(d.timeline_allocated) == 10_000
    assert d.timeline_ns[-1] == n - 1


def test_no_memory_events() -> None:
    assert memory_stats(make([])).note is not None


# --- tensor cores --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gemm", "tc"),
    [
        ("volta_h884cudnn_256x64_sliced1x2_ldg8_relu_exp_small_nhwc_tn_v1", True, True),
        ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", True, True),
        ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", True, True),
        ("ampere_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", True, True),
        ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", True, True),
        (
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            True,
            True,
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)",
            True,
            True,
        ),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", True, True),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_MFMA", True, True),
        (
            "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_ISA90a_WG64_4_1",
            True,
            True,
        ),
        (
            "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm",
            True,
            True,
        ),
        ("volta_sgemm_128x64_nn", True, False),
        ("volta_scudnn_128x64_relu_interior_nn_v1", True, False),
        (
            "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int)",
            True,
            False,
        ),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)", True, False),
        ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int)", True, False),
        ("cutlass_80_simt_sgemm_128x64_8x5_nn_align1", True, False),
        ("Cijk_Ailk_Bljk_SB_MT64x64x8_SN_1LDSB0_AMAS0", True, False),
        (
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct)",
            False,
            False,
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>(int)",
            False,
            False,
        ),
        (
            "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda, convert>(int)",
            False,
            False,
        ),
    ],
)
def test_kernel_name_classification(name: str, gemm: bool, tc: bool) -> None:
    assert is_gemm_conv(name) is gemm
    assert (gemm and on_matrix_units(name)) is tc


def _tc_trace(cc: tuple[int, int] | None) -> KinetoTrace:
    devices = () if cc is None else (DeviceInfo(index=0, name="gpu", compute_capability=cc),)
    rows = [
        kernel(0, 30, name="volta_h884gemm_64x64_nn"),
        kernel(30, 70, name="volta_sgemm_128x64_nn"),
        kernel(100, 100, name="void at::native::vectorized_elementwise_kernel<4>()"),
    ]
    return make(rows, devices=devices)


def test_tensor_core_shares_and_status() -> None:
    u = tensor_core_use(_tc_trace((7, 0)))
    assert (u.kernel_ns, u.gemm_conv_ns, u.matrix_unit_ns) == (200, 100, 30)
    assert (u.gemm_conv_share, u.matrix_unit_share, u.off_matrix_share) == (0.5, 0.3, 0.7)
    assert u.status is TensorCoreStatus.PARTIAL and u.supported
    assert u.top_off_matrix == (("volta_sgemm_128x64_nn", 70),)
    assert tensor_core_use(_tc_trace((6, 1))).status is TensorCoreStatus.UNSUPPORTED
    # No device properties, but an HMMA kernel ran: the device has Tensor Cores.
    assert tensor_core_use(_tc_trace(None)).supported is True


def test_tensor_core_unknown_and_no_gemm() -> None:
    only_sgemm = make([kernel(0, 10, name="volta_sgemm_128x64_nn")])
    assert tensor_core_use(only_sgemm).status is TensorCoreStatus.UNKNOWN
    assert tensor_core_use(make([kernel(0, 10)])).status is TensorCoreStatus.NO_GEMM


# --- ranks ---------------------------------------------------------------------------------------------


def _rank(rank: int, compute: int, comm: list[int]) -> KinetoTrace:
    rows: list[dict[str, Any]] = [ev(Kind.USER_ANNOTATION, "ProfilerStep#1", 0, 1000)]
    rows.append(kernel(0, compute, name="volta_sgemm_128x64_nn"))
    t = compute
    for d in comm:
        rows.append(kernel(t, d, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)"))
        t += d
    return make(rows, rank=rank)


def test_ranks_wait_in_collectives_and_straggler() -> None:
    # Rank 2 computes 150 vs 100: it arrives last, so its all-reduce kernels are the shortest (transfer
    # only, 20 and 30) and ranks 0 and 1 wait the excess.
    r = compare_ranks([_rank(2, 150, [20, 30]), _rank(0, 100, [70, 80]), _rank(1, 100, [75, 85])])
    assert [x.rank for x in r.ranks] == [0, 1, 2] and r.matched == 2 and r.unmatched == 0
    assert [(x.wait_ns, x.last_arrivals, x.compute_ns) for x in r.ranks] == [
        (100, 0, 100),
        (110, 0, 100),
        (0, 2, 150),
    ]
    assert r.ranks[0].mean_wait_ns == 50
    assert r.stragglers == (2,) and r.ranks[2].straggler
    assert r.wait_share == pytest.approx(210 / 360)  # 20+30+70+80+75+85


def test_ranks_balanced_and_unmatched() -> None:
    r = compare_ranks([_rank(0, 100, [50, 50, 60]), _rank(1, 104, [50, 52])])
    assert r.stragglers == () and r.matched == 2 and r.unmatched == 1
    with pytest.raises(ValueError, match="same rank"):
        compare_ranks([_rank(0, 1, []), _rank(0, 1, [])])


def test_pageable_copies_block_even_when_the_call_returns_first() -> None:
    rows = [
        ev(Kind.RUNTIME, "cudaMemcpyAsync", 0, 90, correlation=1),
        _copy(10, 100, CopyKind.H2D, HostMemory.PAGEABLE, 1 << 20, 1),  # call ends 20 ns before the copy
        ev(Kind.RUNTIME, "cudaMemcpyAsync", 200, 5, correlation=2),
        _copy(201, 2, CopyKind.H2D, HostMemory.PAGEABLE, 1024, 2),  # ≤ 64 KB: returns once staged
    ]
    s = memcpy_stats(make(rows))
    assert (s.sync_copies, s.sync_host_ns, s.pageable_async) == (1, 90, 2)


def test_idle_host_ops_are_self_times_on_the_launching_thread() -> None:
    """Two kernels with a 100 µs gap. On the main thread the gap is spent in `forward` (40 µs of its
    own) and `aten::addmm` (60 µs, nested in it); a `ProfilerStep#1` range opens inside
    `record_function`'s enter call and outlives it (crossed, as real traces have it). A monitor thread
    sleeps in `wait` throughout: it launched nothing, so it is not the one quoted."""
    from pinchpoint.analysis.gpu.host_evidence import idle_host_ops
    from pinchpoint.analysis.gpu.idle import gpu_idle
    from pinchpoint.trace.kineto import Kind, events_from_rows

    us = 1000
    main, monitor = {"pid": 1, "tid": 1}, {"pid": 1, "tid": 2}
    rows = [
        {"kind": Kind.CPU_OP, "name": "enter", "start_ns": 0, "dur_ns": 5 * us, **main},
        {"kind": Kind.USER_ANNOTATION, "name": "ProfilerStep#1", "start_ns": 2 * us, "dur_ns": 300 * us, **main},
        {"kind": Kind.CPU_OP, "name": "forward", "start_ns": 10 * us, "dur_ns": 200 * us, **main},
        {"kind": Kind.RUNTIME, "name": "cudaLaunchKernel", "start_ns": 12 * us, "dur_ns": 2 * us, "correlation": 1, **main},
        {"kind": Kind.CPU_OP, "name": "aten::addmm", "start_ns": 60 * us, "dur_ns": 60 * us, **main},
        {"kind": Kind.RUNTIME, "name": "cudaLaunchKernel", "start_ns": 150 * us, "dur_ns": 2 * us, "correlation": 2, **main},
        {"kind": Kind.PYTHON_FUNCTION, "name": "wait", "start_ns": 0, "dur_ns": 400 * us, **monitor},
        {"kind": Kind.KERNEL, "name": "k", "start_ns": 20 * us, "dur_ns": 20 * us, "correlation": 1, "pid": 0, "tid": 7, "device": 0, "stream": 7},
        {"kind": Kind.KERNEL, "name": "k", "start_ns": 140 * us, "dur_ns": 20 * us, "correlation": 2, "pid": 0, "tid": 7, "device": 0, "stream": 7},
    ]  # fmt: skip
    ev = events_from_rows(rows)
    ops = dict(idle_host_ops(ev, gpu_idle(ev)))
    assert ops == {"aten::addmm": pytest.approx(0.6), "forward": pytest.approx(0.4)}
