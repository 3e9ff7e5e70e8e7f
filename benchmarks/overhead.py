"""Overhead of `pinchpoint run` in default mode: paired runs of the same example with and without it.

    .venv/bin/python benchmarks/overhead.py [--quads 6] [--steps 150] [--arm opwindow-off] [EXAMPLE ...]

Each example prints its own `median_step_ms` (measured by the program, so pinchpoint's start-up and
report time don't count, only what it adds to the steps). Runs come in ABBA quads (bare, profiled,
profiled, bare, then the mirror image), so a drift of the machine's speed during a quad cancels and
neither arm always runs first (the first run of a series was measurably faster here). A quad's ratio is
(sum of profiled) / (sum of bare); the overhead is the median over quads. Target: ≤ 1.02.

`--arm opwindow-off` adds a third arm, `pinchpoint run --opwindow off`, to split the op window's share
of the overhead from the hooks' and the sampler's.

`--malloc pinned` runs every arm with glibc's mmap and trim thresholds fixed (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_). glibc moves its mmap threshold each time a large block is freed, and whether a
program's big tensors then cost thousands of page faults per step depends on its allocation history:
anything that allocates in the process (the op window's profiler does) can move steady-state step time
by ±15% either way. `examples/healthy.py` pins them itself (mallopt), so it measures pinchpoint's own
cost either way.
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
DEFAULT = ["examples/healthy.py", "examples/input_fetch.py"]
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
    ap.add_argument("--quads", type=int, default=6, help="ABBA quads per arm (4 runs each)")
    ap.add_argument("--steps", type=int, default=150, help="--steps passed to each example")
    ap.add_argument("--arm", action="append", default=[], choices=["opwindow-off"])
    ap.add_argument("--malloc", choices=["default", "pinned"], default="default")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.malloc == "pinned":
        env.update(PINNED_MALLOC)
    py = sys.executable
    pinchpoint = str(Path(py).with_name("pinchpoint"))
    arms: dict[str, list[str]] = {"default": []}
    if "opwindow-off" in args.arm:
        arms["opwindow off"] = ["--opwindow", "off"]
    print(f"{args.quads} ABBA quads per arm, --steps {args.steps}, {args.malloc} malloc")
    worst = 0.0
    for ex in args.examples:
        prog = [ex, "--steps", str(args.steps)]
        for arm, opts in arms.items():
            ratios, bare_all, prof_all = [], [], []
            for q in range(args.quads):
                order = ["b", "p", "p", "b"] if q % 2 == 0 else ["p", "b", "b", "p"]
                bare, prof = [], []
                for kind in order:
                    if kind == "b":
                        bare.append(step_ms([py, *prog], env))
                    else:
                        with tempfile.TemporaryDirectory() as tmp:
                            cmd = [pinchpoint, "run", "-q", *opts, "-o", f"{tmp}/run", *prog]
                            prof.append(step_ms(cmd, env))
                ratios.append(sum(prof) / sum(bare))
                bare_all += bare
                prof_all += prof
            med = statistics.median(ratios)
            if arm == "default":
                worst = max(worst, med)
            print(
                f"{ex:28} {arm:13} bare {statistics.median(bare_all):7.2f} ms  profiled "
                f"{statistics.median(prof_all):7.2f} ms  overhead {med:6.3f} (quads: "
                f"{', '.join(f'{r:.3f}' for r in ratios)})",
                flush=True,
            )
    print(f"worst default-mode overhead: {worst:.3f} (target ≤ 1.02)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
