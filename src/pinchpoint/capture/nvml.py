"""GPU readings for the system sampler through NVML (pynvml, imported lazily; optional).

Standard library only at import time: the sampler process imports this at start-up (see
:mod:`.sampler`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from pinchpoint.capture.sampler_files import SamplerLog


class Gpus:
    """NVML access; ``available`` is False when pynvml is missing or nvmlInit fails."""

    def __init__(self, log: SamplerLog) -> None:
        self._log = log
        self._nvml: Any = None
        self._handles: list[Any] = []
        self.available = False
        try:
            import pynvml

            pynvml.nvmlInit()
            count = int(pynvml.nvmlDeviceGetCount())
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._nvml = pynvml
            self.available = True
        except Exception:  # not installed, no driver, no GPU: simply no "gpus" key
            self._nvml = None

    def sample(self) -> list[dict[str, Any]]:
        nv = self._nvml
        out: list[dict[str, Any]] = []
        for index, h in enumerate(self._handles):
            gpu: dict[str, Any] = {
                "index": index,
                "util_percent": None,
                "mem_used_bytes": None,
                "mem_total_bytes": None,
                "power_w": None,
                "sm_clock_mhz": None,
            }
            try:
                gpu["util_percent"] = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception as exc:
                self._log.error("nvml utilization", exc)
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                gpu["mem_used_bytes"] = int(mem.used)
                gpu["mem_total_bytes"] = int(mem.total)
            except Exception as exc:
                self._log.error("nvml memory", exc)
            try:
                gpu["power_w"] = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0
            except Exception as exc:
                self._log.error("nvml power", exc)
            try:
                gpu["sm_clock_mhz"] = int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            except Exception as exc:
                self._log.error("nvml clock", exc)
            out.append(gpu)
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
