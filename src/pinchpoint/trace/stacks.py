"""Python stack samples of a run (py-spy, or any folded-stack file), aggregated by identical stack."""

from __future__ import annotations

import re
from dataclasses import dataclass

OWN_FILE = "<pinchpoint>"
"""The file of the frame pinchpoint's sampler puts at the leaf of a stack in its own work (a probe, the
op window starting, a record written): pinchpoint's time, never the program's."""

_NATIVE = re.compile(r"(\.so(\.[\d.]+)?$)|(^\?$)|(^\[)")


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str = ""
    """As the sampler wrote it: a path, or a short file name."""
    line: int | None = None

    @property
    def native(self) -> bool:
        """A frame of native code (`sgemm_ (.../libtorch_cpu.so)`, `0x7f.. (?)`, `[kernel.kallsyms]`):
        what `run --stacks --native` and perf add below the Python frames."""
        return _NATIVE.search(self.file) is not None

    @property
    def label(self) -> str:
        """`function (file.py:12)`: the form py-spy and flame graphs use."""
        if not self.file:
            return self.function
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{self.function} ({where})"


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSample:
    frames: tuple[Frame, ...]
    """Root first."""
    count: int
    pid: int | None = None
    thread: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TimedSample:
    """One sample of one thread, in time (pinchpoint's own sampler, `capture/pysampler.py`)."""

    t_ns: int
    """On the monotonic clock the steps use."""
    stack: StackSample
    """Its frames, pid and thread (`count` is the aggregate's, not this sample's)."""
    cpu_ns: int
    """Of `wall_ns`, the CPU time it stands for (the thread's running share at the sample)."""
    wall_ns: int
    """The wall time since the thread's previous sample (a period, or more when a call held the GIL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stacks:
    samples: tuple[StackSample, ...]
    rate_hz: float | None = None
    """Samples per second per thread, when known: turns counts into seconds."""
    source: str = ""
    idle_included: bool = False
    """False: waiting threads (I/O, locks, sleeping) were not sampled, as py-spy does by default."""
    timeline: tuple[TimedSample, ...] = ()
    """Each sample in time (pinchpoint's sampler): where the run's segments spent their wall time.
    `samples` then weigh each stack by the CPU time its samples carried, in samples of 1/rate_hz."""

    @property
    def total(self) -> int:
        return sum(s.count for s in self.samples)
