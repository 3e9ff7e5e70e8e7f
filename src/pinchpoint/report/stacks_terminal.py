"""`pinchpoint analyze` on a perf or folded stack file, in the terminal: where the CPU time went below
Python, which math kernels ran, the hottest leaf functions."""

from __future__ import annotations

from typing import TextIO

from pinchpoint.report.stacks_doc import StacksDoc

CAUSE_NAMES = {
    "page_faults": "page faults and zeroing (kernel)",
    "unmap": "unmapping memory (kernel)",
    "omp_runtime": "OpenMP runtime (barrier spin, wake-ups)",
    "sched": "scheduler and futex (kernel)",
    "memcpy": "memcpy / memmove / memset",
    "python": "Python interpreter",
    "math": "math kernels (BLAS, oneDNN)",
    "jit_unnamed": "JIT code without names",
    "other": "other native code",
}


def render_stacks(doc: StacksDoc, out: TextIO) -> None:
    print(f"pinchpoint  analyze {doc.source}  ({doc.format}, {doc.weight:,} {doc.weight_unit})", file=out)
    native = doc.native
    if native is not None:
        print(file=out)
        print("Where the CPU time went", file=out)
        for cause, share in sorted(native.shares.items(), key=lambda kv: -kv[1]):
            if share >= 0.005:
                print(f"  {CAUSE_NAMES.get(cause, cause):42s} {share:6.1%}", file=out)
        print(f"  threads sampled: {native.threads}, busy: {native.busy_threads}", file=out)
        if native.kernels:
            print(file=out)
            print("Math kernels (instruction set from their names)", file=out)
            for k in native.kernels:
                isa = f"  [{k.isa}]" if k.isa else ""
                print(f"  {k.share:6.1%}  {k.kernel}{isa}", file=out)
    if doc.top:
        print(file=out)
        print("Hottest leaf functions", file=out)
        for t in doc.top:
            print(f"  {t.share:6.1%}  {t.function}", file=out)
    for w in doc.warnings:
        print(f"warning: {w}", file=out)
