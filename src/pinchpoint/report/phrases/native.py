"""Native stacks (perf) in words: the evidence lines `diagnosis/native_evidence.py` adds."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import pct


def _threads(busy: int, threads: int, cores: int | None, omp: float, sched: float) -> str:
    on = f" on {cores} usable core{'s' if cores != 1 else ''}" if cores else ""
    return (
        f"Native stacks (perf): {busy} of the process's {threads} sampled threads were busy{on}; "
        f"{pct(omp)} of the CPU time in the OpenMP runtime (barrier spin and wake-ups), {pct(sched)} "
        "in the kernel's scheduler and futex paths"
    )


def _kernels(kernels: tuple[tuple[str, str, float], ...], math: float) -> str:
    listed = "; ".join(f"{name}{f' [{isa}]' if isa else ''} {pct(share)}" for name, isa, share in kernels)
    return f"Native stacks (perf): math kernels are {pct(math)} of the CPU time; the top ones: {listed}"


PHRASES: dict[str, Callable[..., str]] = {
    "native.page_faults": lambda faults, unmap: (
        f"Native stacks (perf): {pct(faults)} of the process's CPU time is the kernel faulting pages "
        f"in and zeroing them, and {pct(unmap)} unmapping them"
    ),
    "native.threads": _threads,
    "native.kernels": _kernels,
}
