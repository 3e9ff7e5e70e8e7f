"""`pinchpoint calibrate`: measure what this machine really sustains, and cache it per machine.

Per device (the CPU with the thread count PyTorch would use, and each CUDA device):
  * dense matmul FLOP/s per dtype: fp32, bf16, fp16 (and TF32 on CUDA),
  * memory bandwidth: a large tensor copy, bytes read + written per second,
  * on CUDA also host<->device copy bandwidth from pinned and from pageable memory, and what one
    tiny kernel costs: on the host to launch it, and on the device back to back.
Each number is the median of timed repetitions after warm-up. A matmul's size grows until one
product takes long enough to time (bounded, so calibration on a slow CPU stays in seconds).

Results are cached as JSON under the pinchpoint home (``$PINCHPOINT_HOME``, else
``$XDG_CACHE_HOME/pinchpoint``, else ``~/.cache/pinchpoint``), keyed by the CPU model, core count,
torch version and GPU names: a different machine or torch build does not reuse another's ceilings.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic
from pinchpoint.trace.ceilings import SCHEMA, cache_path, machine_key

CPU_MATMUL_MAX_N = 4096
CPU_MATMUL_TARGET_NS = 30_000_000
"""Grow the CPU matmul until one product takes at least this long (or hits CPU_MATMUL_MAX_N)."""
SLOW_DTYPE_NS = 10 * CPU_MATMUL_TARGET_NS
"""A dtype whose call at the calibration size would take this long is timed at a quarter of the size."""
CUDA_MATMUL_N = 8192
COPY_BYTES = 256 << 20
LAUNCH_OPS = 2000


def measure_this_machine(
    devices: list[str] | None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], Path]:
    """`pinchpoint calibrate`: import torch, check the devices asked for, measure, cache; return the
    result and where it was cached. Raises UsageError for what cannot be measured here."""
    from pinchpoint.capture import environment
    from pinchpoint.errors import UsageError

    try:
        import torch
    except ImportError:
        raise UsageError(
            "calibrate measures with PyTorch, which is not installed here (pip install 'pinchpoint[torch]')"
        ) from None
    for device in devices or []:
        if device != "cpu" and not device.startswith("cuda"):
            raise UsageError(f"unknown device {device!r}: use 'cpu' or 'cuda:N'")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError(f"{device} asked for, but this PyTorch sees no CUDA device")
    env = environment.collect_environment()
    env["torch"] = environment.torch_info(torch, init_cuda=True)
    result = calibrate(torch, env, devices=devices, progress=progress)
    return result, save(result)


def environment_key(environment: dict[str, Any]) -> str:
    """machine_key of an environment.json-shaped dict whose ``torch`` part holds ``version`` and
    ``cuda_devices`` (as `environment.torch_info` returns it)."""
    cpu = environment.get("cpu") or {}
    t = environment.get("torch") or {}
    gpus = [str(g.get("name")) for g in t.get("cuda_devices") or []]
    return machine_key(cpu.get("model"), cpu.get("logical_cores"), t.get("version"), gpus)


def calibrate(
    torch: Any,
    environment: dict[str, Any],
    *,
    devices: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every requested device ('cpu', 'cuda:0', ...; default: the CPU and all CUDA devices)."""
    say = progress or (lambda _msg: None)
    if devices is None:
        devices = ["cpu"] + [f"cuda:{i}" for i in range(_cuda_count(torch))]
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "machine_key": environment_key(environment),
        "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": getattr(torch, "__version__", None),
        "devices": [],
    }
    for device in devices:
        say(f"measuring {device}")
        if device == "cpu":
            result["devices"].append(measure_cpu(torch, environment))
        else:
            result["devices"].append(measure_cuda(torch, device))
    return result


def save(result: dict[str, Any]) -> Path:
    path = cache_path(str(result["machine_key"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, result)
    return path


def _cuda_count(torch: Any) -> int:
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _median_ns(fn: Callable[[], None], reps: int, sync: Callable[[], None]) -> int:
    samples = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter_ns()
        fn()
        sync()
        samples.append(time.perf_counter_ns() - t0)
    return int(statistics.median(samples))


def measure_cpu(torch: Any, environment: dict[str, Any]) -> dict[str, Any]:
    no_sync: Callable[[], None] = lambda: None  # noqa: E731
    out: dict[str, Any] = {
        "device": "cpu",
        "name": (environment.get("cpu") or {}).get("model"),
        "threads": int(torch.get_num_threads()),
        "matmul_flops": {},
        "matmul_n": None,
        "memory_bytes_per_s": None,
    }
    with torch.no_grad():
        n = 512
        while True:
            a, b = torch.full((n, n), 0.5), torch.full((n, n), 0.25)
            torch.mm(a, b)
            t = _median_ns(functools.partial(torch.mm, a, b), 3, no_sync)
            if t >= CPU_MATMUL_TARGET_NS or n >= CPU_MATMUL_MAX_N:
                break
            n *= 2
        out["matmul_n"] = n
        for name in ("float32", "bfloat16", "float16"):
            x, y = a.to(getattr(torch, name)), b.to(getattr(torch, name))
            m = n // 4
            xs, ys = x[:m, :m].contiguous(), y[:m, :m].contiguous()
            torch.mm(xs, ys)  # warm-up (a kernel's first call also builds it)
            t0 = time.perf_counter_ns()
            torch.mm(xs, ys)  # a quarter of the size first: 1/64 of the work
            if (time.perf_counter_ns() - t0) * 64 > SLOW_DTYPE_NS:
                # No fast kernel for this dtype here (bf16 and fp16 emulated on an AVX2 CPU run 40-60x
                # slower than fp32: ~3 s a call at the full size): measured at the quarter size.
                ns = _median_ns(functools.partial(torch.mm, xs, ys), 3, no_sync)
            else:
                m = n
                torch.mm(x, y)  # warm-up
                ns = _median_ns(functools.partial(torch.mm, x, y), 5, no_sync)
            out["matmul_flops"][name] = 2 * m**3 / (ns / 1e9)
        src = torch.empty(COPY_BYTES // 4)
        src.fill_(1.0)
        dst = torch.empty_like(src)
        dst.copy_(src)
        ns = _median_ns(functools.partial(dst.copy_, src), 7, no_sync)
        out["memory_bytes_per_s"] = 2 * COPY_BYTES / (ns / 1e9)
    return out


def measure_cuda(torch: Any, device: str) -> dict[str, Any]:
    dev = torch.device(device)
    props = torch.cuda.get_device_properties(dev)

    def sync() -> None:
        torch.cuda.synchronize(dev)

    out: dict[str, Any] = {
        "device": device,
        "name": str(props.name),
        "matmul_flops": {},
        "matmul_n": CUDA_MATMUL_N,
        "memory_bytes_per_s": None,
        "h2d_bytes_per_s": {},
        "d2h_bytes_per_s": {},
        "launch_host_ns": None,
        "launch_device_ns": None,
    }
    n = CUDA_MATMUL_N
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        with torch.no_grad():
            for label, dtype, tf32 in (
                ("float32", "float32", False),
                ("tf32", "float32", True),
                ("bfloat16", "bfloat16", False),
                ("float16", "float16", False),
            ):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                x = torch.full((n, n), 0.5, device=dev, dtype=getattr(torch, dtype))
                y = torch.full((n, n), 0.25, device=dev, dtype=getattr(torch, dtype))
                for _ in range(3):
                    torch.mm(x, y)
                ns = _median_ns(functools.partial(torch.mm, x, y), 10, sync)
                out["matmul_flops"][label] = 2 * n**3 / (ns / 1e9)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32

    big = 1 << 30
    src = torch.empty(big, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    out["memory_bytes_per_s"] = 2 * big / (_median_ns(functools.partial(dst.copy_, src), 10, sync) / 1e9)
    src = dst = None

    on_dev = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
    for kind in ("pinned", "pageable"):
        host = torch.ones(COPY_BYTES, dtype=torch.uint8)
        if kind == "pinned":
            host = host.pin_memory()
        on_dev.copy_(host)
        h2d = _median_ns(functools.partial(on_dev.copy_, host), 5, sync)
        d2h = _median_ns(functools.partial(host.copy_, on_dev), 5, sync)
        out["h2d_bytes_per_s"][kind] = COPY_BYTES / (h2d / 1e9)
        out["d2h_bytes_per_s"][kind] = COPY_BYTES / (d2h / 1e9)
    on_dev = None

    one = torch.ones(1, device=dev)
    for _ in range(100):
        torch.add(one, one)
    sync()
    host_samples, device_samples = [], []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(LAUNCH_OPS):
            torch.add(one, one)
        t1 = time.perf_counter_ns()
        sync()
        t2 = time.perf_counter_ns()
        host_samples.append((t1 - t0) / LAUNCH_OPS)
        device_samples.append((t2 - t0) / LAUNCH_OPS)
    out["launch_host_ns"] = statistics.median(host_samples)
    out["launch_device_ns"] = statistics.median(device_samples)
    with contextlib.suppress(Exception):
        torch.cuda.empty_cache()
    return out
