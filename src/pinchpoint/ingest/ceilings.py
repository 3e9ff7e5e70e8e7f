"""Reading the cache `pinchpoint calibrate` writes: this machine's measured ceilings, one file per
machine (where it lives and how it is keyed: `trace/ceilings.py`). No torch needed to read it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pinchpoint.trace.ceilings import SCHEMA, cache_path, machine_key


def load_cached(key: str) -> dict[str, Any] | None:
    """The cached ceilings for this machine key, or None (missing or unreadable)."""
    try:
        data = json.loads(cache_path(key).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def gpu_matmul_flops(ceilings: dict[str, Any] | None, device_name: str | None) -> dict[str, float] | None:
    """Measured matmul FLOP/s per dtype of the first cached CUDA device named `device_name`."""
    if not ceilings or not device_name:
        return None
    for dev in ceilings.get("devices") or []:
        if str(dev.get("device", "")).startswith("cuda") and dev.get("name") == device_name:
            flops = dev.get("matmul_flops")
            if isinstance(flops, dict):
                return {str(k): float(v) for k, v in flops.items() if isinstance(v, (int, float))}
    return None


def gpu_memory_bandwidth(ceilings: dict[str, Any] | None, device_name: str | None) -> float | None:
    """Measured device-memory bandwidth (bytes/s) of the first cached CUDA device named `device_name`."""
    for dev in (ceilings or {}).get("devices") or []:
        if str(dev.get("device", "")).startswith("cuda") and dev.get("name") == device_name:
            bw = dev.get("memory_bytes_per_s")
            return float(bw) if isinstance(bw, (int, float)) and bw > 0 else None
    return None


def run_machine_key(run_dir: Path, torch_version: str | None, gpu_names: Sequence[str]) -> str | None:
    """The cache key of the machine a run directory was recorded on: its `environment.json`'s CPU
    model and logical cores, with the torch version and GPU names of its main process (which the
    caller read from the run). None when environment.json can't be read."""
    try:
        env = json.loads((run_dir / "environment.json").read_text())
        cpu = env.get("cpu") or {}
        return machine_key(cpu.get("model"), cpu.get("logical_cores"), torch_version, gpu_names)
    except (OSError, ValueError, AttributeError):
        return None
