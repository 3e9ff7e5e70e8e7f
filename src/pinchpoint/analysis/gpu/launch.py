"""Kernel launch statistics: each kernel joined to the host API call that launched it.

The runtime/driver launch call (`cudaLaunchKernel`, `cuLaunchKernel`, `hipLaunchKernel`,
`cudaGraphLaunch`, ...) and the kernel it enqueued share `correlation`. From the pair:

- launch delay: kernel start − launch-call start (queueing plus the call itself);
- launch cost: the launch call's own duration (a graph launch's cost is shared among its kernels);
- short kernels: kernels that run for less time than their launch cost (HTA's "short kernel" signal);
- launch-bound evidence: over the window in which the launching threads issue launches, the GPU is
  mostly idle, those threads are mostly busy in ops or API calls, and the typical kernel is shorter than the typical launch call.
  Then the host cannot issue work fast enough: fuse ops (torch.compile), use CUDA Graphs, or raise the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu._common import (
    HOST_API_KINDS,
    Distribution,
    busy_within,
    distribution,
    gpu_busy,
    join_by_key,
    kind_mask,
    name_mask,
)
from pinchpoint.analysis.gpu.steps import STEP_NAME, step_windows
from pinchpoint.trace.kineto import Kind, KinetoTrace

GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
"""A CUDA/HIP graph's replay: one call, every kernel of the graph under its correlation."""
LAUNCH_PREFIXES = (
    "cudaLaunch",  # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel
    "cuLaunch",  # cuLaunchKernel, cuLaunchKernelEx (Triton)
    "hipLaunch",
    "hipExtLaunch",
    "hipModuleLaunch",
    "hipExtModuleLaunchKernel",
    *GRAPH_LAUNCHES,
)

TINY_KERNEL_NS = 10_000
"""Kernels under 10 µs: at or below the 5–20 µs a launch usually costs (HTA kernel-launch docs)."""
LAUNCH_BOUND_GPU_BUSY = 0.5
"""GPU busy below 50% of the launch window: 'low utilization' (torch-tb-profiler, nsys gpu_time_util)."""
LAUNCH_BOUND_HOST_BUSY = 0.8
"""The launching thread is inside framework ops or API calls for ≥ 80% of the window: it has no slack."""


def is_launch(name: str) -> bool:
    return name.startswith(LAUNCH_PREFIXES)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchStats:
    kernels: int
    kernels_joined: int
    """Kernels whose launch call was found by correlation."""
    launch_calls: int
    launch_delay: Distribution
    """Kernel start − launch-call start, over joined kernels."""
    launch_call: Distribution
    """Durations of the launch calls themselves."""
    kernel: Distribution
    """Durations of all kernels."""
    short_kernels: int
    """Joined kernels shorter than their launch cost (launch-call duration ÷ kernels it launched)."""
    short_kernel_share: float
    """`short_kernels` over joined kernels."""
    tiny_kernels: int
    """Kernels under TINY_KERNEL_NS."""
    tiny_kernel_time_share: float
    """Time in kernels under TINY_KERNEL_NS over all kernel time."""
    steps: int
    kernels_per_step: float | None
    """Mean kernels launched inside a `ProfilerStep#N` window; None without steps."""
    launch_thread: int | None
    """tid of the host thread that issued the most launches."""
    window_ns: int
    """From that thread's first launch start to its last launch end."""
    gpu_busy_fraction: float
    """GPU busy (any device, any activity) over the window."""
    host_busy_fraction: float
    """The launching thread's time inside CPU ops or API calls over the window."""
    launch_bound: bool
    """All launch-bound conditions hold (see the module docstring and the thresholds)."""


def launch_stats(trace: KinetoTrace) -> LaunchStats:
    ev = trace.events
    kernels = np.flatnonzero(kind_mask(ev, Kind.KERNEL))
    launches = np.flatnonzero(name_mask(ev, is_launch, *HOST_API_KINDS))
    k_start, k_dur = ev.start_ns[kernels], ev.dur_ns[kernels]

    hit = join_by_key(ev.correlation[kernels], ev.correlation[launches])
    joined = hit >= 0
    lrow = launches[hit[joined]]
    delay = k_start[joined] - ev.start_ns[lrow]
    # A graph launch enqueues many kernels under one correlation: share its cost among them.
    _, inverse, per_launch = np.unique(lrow, return_inverse=True, return_counts=True)
    cost = ev.dur_ns[lrow] / per_launch[inverse]
    short = int(np.count_nonzero(k_dur[joined] < cost))

    tiny = k_dur < TINY_KERNEL_NS
    k_total = int(k_dur.sum())

    numbers, s_starts, s_ends = step_windows(ev)
    per_step: float | None = None
    if numbers.size:
        # Count a kernel in the step whose host window issued it (its launch call), else by its own start.
        issued = k_start.copy()
        issued[joined] = ev.start_ns[lrow]
        ordered = np.sort(issued)
        inside = np.searchsorted(ordered, s_ends) - np.searchsorted(ordered, s_starts)
        per_step = float(inside.mean())

    thread, window, gpu_frac, host_frac = _launch_window(trace, launches)
    median_kernel = float(np.median(k_dur)) if k_dur.size else 0.0
    median_launch = float(np.median(ev.dur_ns[launches])) if launches.size else 0.0
    bound = (
        launches.size > 0
        and gpu_frac < LAUNCH_BOUND_GPU_BUSY
        and host_frac >= LAUNCH_BOUND_HOST_BUSY
        and median_kernel < median_launch
    )
    return LaunchStats(
        kernels=int(kernels.size),
        kernels_joined=int(np.count_nonzero(joined)),
        launch_calls=int(launches.size),
        launch_delay=distribution(delay),
        launch_call=distribution(ev.dur_ns[launches]),
        kernel=distribution(k_dur),
        short_kernels=short,
        short_kernel_share=short / max(int(np.count_nonzero(joined)), 1),
        tiny_kernels=int(np.count_nonzero(tiny)),
        tiny_kernel_time_share=int(k_dur[tiny].sum()) / max(k_total, 1),
        steps=int(numbers.size),
        kernels_per_step=per_step,
        launch_thread=thread,
        window_ns=window,
        gpu_busy_fraction=gpu_frac,
        host_busy_fraction=host_frac,
        launch_bound=bool(bound),
    )


LAUNCHER_MIN_SHARE = 0.05
"""A thread that issues at least 5% of the launches counts as a launching thread (CUDA training launches
forward kernels from the main thread and backward kernels from autograd's device thread)."""


def _launch_window(trace: KinetoTrace, launches: np.ndarray) -> tuple[int | None, int, float, float]:
    """(busiest launching tid, window length, GPU busy fraction, host busy fraction) over the window from
    the first to the last launch of the launching threads; host busy is the time at least one of them is
    inside a CPU op or an API call."""
    ev = trace.events
    if launches.size == 0:
        return None, 0, 0.0, 0.0
    tids, counts = np.unique(ev.tid[launches], return_counts=True)
    tid = int(tids[np.argmax(counts)])
    pid = int(ev.pid[launches[ev.tid[launches] == tid][0]])
    launchers = tids[counts >= LAUNCHER_MIN_SHARE * launches.size]
    mine = launches[np.isin(ev.tid[launches], launchers) & (ev.pid[launches] == pid)]
    lo, hi = int(ev.start_ns[mine].min()), int(ev.end_ns[mine].max())
    window = max(hi - lo, 1)
    lo_a, hi_a = np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64)
    gpu = int(busy_within(gpu_busy(ev), lo_a, hi_a)[0])
    # CPU ops and API calls; not step ranges (they span the idle time too) nor user annotations.
    not_step = ~ev.mask_names(lambda s: STEP_NAME.match(s) is not None)
    host = (
        kind_mask(ev, Kind.CPU_OP, *HOST_API_KINDS) & not_step & np.isin(ev.tid, launchers) & (ev.pid == pid)
    )
    host_iv = iv.union(ev.start_ns[host], ev.end_ns[host])
    host_ns = int(busy_within(host_iv, lo_a, hi_a)[0])
    return tid, hi - lo, gpu / window, host_ns / window
