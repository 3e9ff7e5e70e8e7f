"""Overhead of `pinchpoint run` in default mode: paired runs of the same example with and without it.

    .venv/bin/python benchmarks/overhead.py [--reps 5] [EXAMPLE ...]

Each example prints its own `median_step_ms` (measured by the program, so pinchpoint's start-up and
report time don't count, only what it adds to the steps). Runs alternate bare / profiled to share the
machine's noise; the ratio of the medians over repetitions is the overhead. Target: ≤ 1.02.

`--malloc pinned` runs both arms with glibc's mmap and trim thresholds fixed (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_). glibc moves its mmap threshold each time a large block is freed, and whether a
program's big tensors then cost thousands of page faults per step depends on its allocation history:
anything that allocates in the process (the op window's profiler does) can move steady-state step time by
±15% either way. Pinning the thresholds removes that confound and measures what pinchpoint itself costs;
the default arm measures what a user will see.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
DEFAULT = ["examples/healthy.py", "examples/input_fetch.py", "examples/host_python.py"]
PATTERN = re.compile(r"median_step_ms=([0-9.]+)")


def step_ms(cmd: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout
    m = PATTERN.search(out)
    if m is None:
        raise RuntimeError(f"no median_step_ms in output of {cmd}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--malloc", choices=["default", "pinned"], default="default")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.malloc == "pinned":
        env.update(PINNED_MALLOC)
    py = sys.executable
    pinchpoint = str(Path(py).with_name("pinchpoint"))
    print(
        f"{'example':28} {'bare ms':>9} {'profiled ms':>12} {'ratio':>7}  (median of {args.reps} paired runs, {args.malloc} malloc)"
    )
    worst = 0.0
    for ex in args.examples:
        bare, prof = [], []
        for _ in range(args.reps):
            bare.append(step_ms([py, ex], env))
            with tempfile.TemporaryDirectory() as tmp:
                prof.append(step_ms([pinchpoint, "run", "-q", "-o", f"{tmp}/run", ex], env))
        b, p = statistics.median(bare), statistics.median(prof)
        ratios = [pp / bb for pp, bb in zip(prof, bare, strict=True)]
        worst = max(worst, p / b)
        print(
            f"{ex:28} {b:9.2f} {p:12.2f} {p / b:7.3f}  paired ratios: {', '.join(f'{r:.3f}' for r in ratios)}"
        )
    print(f"worst median ratio: {worst:.3f} (target ≤ 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
