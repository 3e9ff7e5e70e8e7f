"""Every rule, in one explicit tuple (a test keeps the ids unique)."""

from __future__ import annotations

from pinchpoint.diagnosis.rules.base import Rule
from pinchpoint.diagnosis.rules.compute import ComputeMath, ComputeMemory
from pinchpoint.diagnosis.rules.cpu import CpuOversubscription, CpuUnderuse
from pinchpoint.diagnosis.rules.host import HostDispatch, HostPython
from pinchpoint.diagnosis.rules.input import InputFetch, InputPreprocess
from pinchpoint.diagnosis.rules.io import IoCheckpoint
from pinchpoint.diagnosis.rules.memory import AllocatorChurn, MemoryLeak

RULES: tuple[Rule, ...] = (
    InputFetch(),
    InputPreprocess(),
    HostPython(),
    HostDispatch(),
    ComputeMath(),
    ComputeMemory(),
    CpuOversubscription(),
    CpuUnderuse(),
    IoCheckpoint(),
    MemoryLeak(),
    AllocatorChurn(),
)
