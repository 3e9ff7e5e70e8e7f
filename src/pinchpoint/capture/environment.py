"""Facts about the machine, the torch build and the thread settings.

* :func:`collect_environment` is what the launcher writes to ``environment.json`` (needs no torch).
* :func:`torch_info` and :func:`thread_info` are the ``torch`` and ``threads`` parts of
  ``process-{pid}.json``; the agent passes the torch module it already imported (this module never
  imports torch).

Formats: docs/run-directory.md. None of the three functions raises: whatever cannot be determined is
left out, None, or empty.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import socket
import time
from pathlib import Path
from typing import Any

# CPU flags that matter for ML, in a stable order (x86 names as in /proc/cpuinfo, then ARM "Features").
ML_FLAGS: tuple[str, ...] = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "amx_fp16",
    # ARM
    "asimd",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
    "sme",
)

# Flags that make low-precision matrix multiplication faster than fp32, i.e. where bf16/fp16/int8
# (autocast, quantization) can pay off on this CPU.
#   amx_*:                        Intel AMX tile matrix units (Sapphire Rapids and later)
#   avx512_bf16 / avx512_fp16:    bf16 dot products / native fp16 vector math (Cooper Lake, SPR)
#   avx512_vnni / avx_vnni:       int8 dot products (Cascade Lake / Alder Lake and later)
#   sme:                          ARM Scalable Matrix Extension (outer-product matrix unit)
#   bf16 / i8mm:                  ARM BFMMLA / SMMLA matrix-multiply-accumulate instructions
MATRIX_UNIT_FLAGS: tuple[str, ...] = (
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx_vnni",
    "sme",
    "bf16",
    "i8mm",
)

# Environment variables that decide how many threads the math libraries use and how they spin/bind.
THREAD_ENV_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TORCH_NUM_THREADS",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "OMP_WAIT_POLICY",
    "OMP_DYNAMIC",
    "MKL_DYNAMIC",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "KMP_HW_SUBSET",
    "GOMP_SPINCOUNT",
)

# Keys kept from the "Build settings" line of torch.__config__.show().
TORCH_CONFIG_KEYS: tuple[str, ...] = (
    "BLAS_INFO",
    "LAPACK_INFO",
    "USE_MKLDNN",
    "USE_OPENMP",
    "USE_CUDA",
    "USE_ROCM",
    "CUDA_VERSION",
)

_CGROUP_ROOT = Path("/sys/fs/cgroup")


# -- environment.json ------------------------------------------------------------------------------


def collect_environment() -> dict[str, Any]:
    """Machine facts for ``environment.json``; never raises, never imports torch.

    Besides the documented keys, ``cpu.quota_cores`` (CPU limit of the cgroup, e.g. ``docker --cpus``,
    as a number of cores; None when unlimited or unknown) and ``memory_limit_bytes`` (cgroup memory
    limit; None when unlimited or unknown) are filled in: a container limited to 2 cores on a 64-core
    host still shows 64 usable cores, and torch sizes its thread pool from those.
    """
    cpuinfo = _read_cpuinfo()
    flags = _ml_flags(cpuinfo)
    cpu: dict[str, Any] = {
        "model": _cpu_model(cpuinfo),
        "logical_cores": _safe(lambda: os.cpu_count()),
        "physical_cores": _safe(_physical_cores),
        "usable_cores": _safe(_usable_cores),
        "flags": flags,
        "matrix_units": [f for f in MATRIX_UNIT_FLAGS if f in flags],
        "quota_cores": _safe(_cgroup_cpu_quota),
    }
    return {
        "cpu": cpu,
        "memory_bytes": _safe(_memory_bytes),
        "memory_limit_bytes": _safe(_cgroup_memory_limit),
        "os": _safe(lambda: f"{platform.system()} {platform.release()}".strip()),
        "python": _safe(platform.python_version),
        "hostname": _safe(_hostname),
    }


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _read_cpuinfo() -> dict[str, str]:
    """The first value of each key in /proc/cpuinfo (the first CPU's block); {} when unavailable."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if not sep:
                    continue
                key = key.strip()
                if key and key not in out:
                    out[key] = value.strip()
    except OSError:
        return {}
    return out


def _cpu_model(cpuinfo: dict[str, str]) -> str | None:
    for key in ("model name", "Model Name", "Processor", "cpu model", "Hardware"):
        value = cpuinfo.get(key)
        if value:
            return value
    try:
        model = platform.processor() or platform.machine()
    except Exception:
        return None
    return model or None


def cpu_model() -> str | None:
    """This CPU's model name, as environment.json has it."""
    return _cpu_model(_read_cpuinfo())


def _ml_flags(cpuinfo: dict[str, str]) -> list[str]:
    """ML-relevant flags present on this CPU ("flags" on x86, "Features" on ARM), in ML_FLAGS order."""
    present = set((cpuinfo.get("flags", "") + " " + cpuinfo.get("Features", "")).split())
    return [f for f in ML_FLAGS if f in present]


BF16_UNIT_FLAGS = ("amx_bf16", "avx512_bf16", "sme", "bf16")
"""Flags of units that multiply bf16 natively (as `diagnosis/rules/compute.BF16_UNITS` reads them)."""


def native_bf16() -> bool:
    """This CPU multiplies bf16 in hardware (else torch emulates it, ~40-177x slower than fp32)."""
    flags = _ml_flags(_read_cpuinfo())
    return any(f in flags for f in BF16_UNIT_FLAGS)


def _physical_cores() -> int | None:
    import psutil

    n = psutil.cpu_count(logical=False)
    return int(n) if n else None


def _usable_cores() -> int | None:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return len(getaffinity(0))
    n = os.cpu_count()  # macOS / Windows: no affinity API here
    return int(n) if n else None


def _memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def _hostname() -> str:
    return platform.node() or socket.gethostname()


def _cgroup_paths() -> list[tuple[str, str]]:
    """(controllers, path) pairs from /proc/self/cgroup; controllers is "" for cgroup v2."""
    out: list[tuple[str, str]] = []
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[1], parts[2]))
    return out


def _cgroup_dirs(mount: Path, path: str) -> list[Path]:
    """The process's cgroup folder under ``mount`` and its ancestors (a limit may sit on any of them).

    Inside a container the path in /proc/self/cgroup is often not visible under the mount (the mount
    is the container's own cgroup); then the mount's root is used.
    """
    rel = path.strip("/")
    dirs: list[Path] = []
    if rel:
        d = mount / rel
        if d.is_dir():
            while True:
                dirs.append(d)
                if d == mount:
                    break
                d = d.parent
            return dirs
    return [mount]


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_cpu_quota() -> float | None:
    """The tightest CPU quota (in cores) on this process's cgroup or its ancestors; None if none."""
    best: float | None = None
    for controllers, path in _cgroup_paths():
        if controllers == "":  # cgroup v2
            mount = _CGROUP_ROOT if (_CGROUP_ROOT / "cgroup.controllers").exists() else None
            if mount is None:
                continue
            for d in _cgroup_dirs(mount, path):
                text = _read_text(d / "cpu.max")  # "max 100000" or "200000 100000"
                if text:
                    quota, _, period = text.partition(" ")
                    if quota != "max" and period:
                        cores = int(quota) / int(period)
                        best = cores if best is None else min(best, cores)
        elif "cpu" in controllers.split(","):
            mount = _v1_mount(controllers, "cpu")
            if mount is None:
                continue
            for d in _cgroup_dirs(mount, path):
                quota_s = _read_text(d / "cpu.cfs_quota_us")
                period_s = _read_text(d / "cpu.cfs_period_us")
                if quota_s and period_s and int(quota_s) > 0 and int(period_s) > 0:
                    cores = int(quota_s) / int(period_s)
                    best = cores if best is None else min(best, cores)
    return best


def _cgroup_memory_limit() -> int | None:
    """The tightest memory limit on this process's cgroup or its ancestors; None if none."""
    best: int | None = None
    try:
        import psutil

        physical: int | None = int(psutil.virtual_memory().total)
    except Exception:
        physical = None
    for controllers, path in _cgroup_paths():
        if controllers == "":
            if not (_CGROUP_ROOT / "cgroup.controllers").exists():
                continue
            files = [d / "memory.max" for d in _cgroup_dirs(_CGROUP_ROOT, path)]
        elif "memory" in controllers.split(","):
            mount = _v1_mount(controllers, "memory")
            if mount is None:
                continue
            files = [d / "memory.limit_in_bytes" for d in _cgroup_dirs(mount, path)]
        else:
            continue
        for f in files:
            text = _read_text(f)
            if text and text.isdigit():
                limit = int(text)
                if physical is not None and limit >= physical:
                    continue  # v1 "unlimited" is a huge number
                best = limit if best is None else min(best, limit)
    return best


def _v1_mount(controllers: str, controller: str) -> Path | None:
    for name in (controllers, controller, ",".join(sorted(controllers.split(",")))):
        p = _CGROUP_ROOT / name
        if p.is_dir():
            return p
    return None


# -- process-{pid}.json: torch ---------------------------------------------------------------------


def torch_info(torch_module: Any, *, init_cuda: bool = False) -> dict[str, Any]:
    """The ``torch`` part of ``process-{pid}.json``; never raises.

    ``cuda_devices`` is filled only when CUDA is already initialised in this process (or
    ``init_cuda``): even ``torch.cuda.is_available()`` initialises the CUDA driver, which freezes
    CUDA_VISIBLE_DEVICES for the rest of the program and can break CUDA in forked DataLoader
    workers, and the profiler must not change what the program does. The agent rewrites the file at
    exit, by which time a program that uses CUDA has initialised it. ``cuda_initialized`` says
    which case applies.
    """
    torch = torch_module
    info: dict[str, Any] = {
        "version": _safe(lambda: str(torch.__version__)),
        "cuda": _safe(lambda: _str_or_none(torch.version.cuda)),
        "hip": _safe(lambda: _str_or_none(getattr(torch.version, "hip", None))),
        "mkl": _safe(lambda: bool(torch.backends.mkl.is_available())),
        "mkldnn": _safe(lambda: bool(torch.backends.mkldnn.is_available())),
        "openmp": _safe(lambda: bool(torch.backends.openmp.is_available())),
        "cpu_capability": _safe(lambda: _str_or_none(torch.backends.cpu.get_cpu_capability())),
        "config_flags": [],
        "cuda_initialized": False,
        "cuda_devices": [],
    }
    with contextlib.suppress(Exception):
        info["config_flags"] = parse_config_flags(str(torch.__config__.show()))
    try:
        initialized = bool(torch.cuda.is_initialized())
    except Exception:
        initialized = False
    info["cuda_initialized"] = initialized
    if initialized or init_cuda:
        info["cuda_devices"] = _cuda_devices(torch)
    return info


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_config_flags(text: str) -> list[str]:
    """``KEY=VALUE`` entries of interest from the output of ``torch.__config__.show()``.

    The build settings are one line (``Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, ...``);
    values may themselves contain spaces (CXX_FLAGS), so entries are split at ``, KEY=``.
    """
    settings: dict[str, str] = {}
    for line in text.splitlines():
        _, sep, rest = line.partition("Build settings:")
        if not sep:
            continue
        for m in re.finditer(r"(?:^|,)\s*([A-Z][A-Z0-9_]*)=(.*?)(?=,\s*[A-Z][A-Z0-9_]*=|,?\s*$)", rest):
            settings.setdefault(m.group(1), m.group(2).strip())
    return [f"{k}={settings[k]}" for k in TORCH_CONFIG_KEYS if k in settings]


def _cuda_devices(torch: Any) -> list[dict[str, Any]]:
    devices: list[dict[str, Any]] = []
    try:
        if not torch.cuda.is_available():
            return devices
        count = int(torch.cuda.device_count())
    except Exception:
        return devices
    for i in range(count):
        try:
            p = torch.cuda.get_device_properties(i)
        except Exception:
            continue
        devices.append(
            {
                "name": _safe(lambda p=p: str(p.name)),
                "capability": _safe(lambda p=p: f"{int(p.major)}.{int(p.minor)}"),
                "total_memory_bytes": _safe(lambda p=p: int(p.total_memory)),
                "multiprocessor_count": _safe(lambda p=p: int(p.multi_processor_count)),
            }
        )
    return devices


# -- process-{pid}.json: threads -------------------------------------------------------------------


def thread_info(torch_module: Any) -> dict[str, Any]:
    """The ``threads`` part of ``process-{pid}.json``; never raises.

    Reading the thread counts does not start torch's thread pools: the program can still call
    ``torch.set_num_interop_threads`` afterwards.
    """
    torch = torch_module
    return {
        "intra_op": _safe(lambda: int(torch.get_num_threads())),
        "inter_op": _safe(lambda: int(torch.get_num_interop_threads())),
        "env": {name: os.environ.get(name) for name in THREAD_ENV_VARS},
    }


def process_record(torch: Any, rank: int, role: str, autocast: str | None, **found: Any) -> dict[str, Any]:
    """A capturing process's process-{pid}.json: who it is, its torch and threads, what the agent found
    (`found`: the loop, the framework; None values left out)."""
    info: dict[str, Any] = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "rank": rank,
        "role": role,
        "started_ns": time.monotonic_ns(),
        "torch": torch_info(torch) if torch is not None else None,
        "threads": thread_info(torch) if torch is not None else None,
        "autocast": {"cpu": autocast},
    }
    info.update({k: v for k, v in found.items() if v is not None})
    return info
