"""`pinchpoint try` against the examples' own fixes, side by side in one run.

For each example: `pinchpoint try --fix FINDING --steps N` (no code changed), then the example plain and
with its own code fix (`--fix` or the flag given), alternating for R reps, each printing its own median
step. Prints the try speedup (with its 99% interval), the code fix's speedup (median of the reps' ratios)
and their ratio. The issue's bar: within 20%.

    .venv/bin/python benchmarks/try_vs_fix.py -r 2
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
OWN_STEPS = 60
"""Steps of each plain / fixed run (each example drops its first 3 from its median)."""
CASES = [
    # example, finding try applies a fix for, the example's own flags for the same fix
    ("cpu_oversubscription", "cpu.oversubscription", ["--fix"]),
    ("allocator_churn", "memory.pressure", ["--fix"]),
    ("input_fetch", "input.fetch", ["--fix"]),
    ("two_causes", "input.fetch", ["--fix", "input"]),
    ("lightning_fit", "input.fetch", ["--fix"]),
    ("io_checkpoint", "io.checkpoint", ["--fix"]),
    ("host_dispatch", "host.dispatch", ["--fix"]),  # compile, against the code fix (batched ops)
    ("stacked_fixes", "input.fetch", ["--fix", "input"]),
    ("stacked_fixes", "io.checkpoint", ["--fix", "checkpoint"]),
    ("comm_exposed", "comm.exposed", ["--fix"]),  # DDP's no_sync() over an accumulating loop, torchrun
    ("fsdp_reshard", "comm.exposed", ["--fix"]),  # FSDP2's reshard_after_forward=False, torchrun
    ("pipeline_bubble", "pipeline.bubble", ["--fix"]),  # n_microbatches 1 -> 2, torchrun
]


def command(example: str) -> list[str]:
    """How the example is launched: its `LAUNCH = "torchrun ..."` line (the DDP examples), else python."""
    script = EXAMPLES / f"{example}.py"
    launch = re.search(r'^LAUNCH = "([^"]+)"', script.read_text(), re.M)
    if launch is None:
        return [sys.executable, str(script)]
    words = launch.group(1).split()
    return [str(Path(sys.executable).with_name(words[0])), *words[1:], str(script)]


def own_median(example: str, flags: list[str]) -> float:
    out = subprocess.run(
        [*command(example), "--steps", str(OWN_STEPS), *flags],
        capture_output=True, text=True, timeout=900, cwd=tempfile.gettempdir(),
    ).stdout  # fmt: skip
    m = re.search(r"median_step_ms=([\d.]+)", out)
    if m is None:
        raise SystemExit(f"{example} {flags}: no median_step_ms line")
    return float(m.group(1))


def tried(example: str, finding: str, steps: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pinchpoint", "try", "--fix", finding, "--steps", str(steps), "-o",
             f"{tmp}/runs", "--", *command(example)],
            capture_output=True, text=True, timeout=900, cwd=tmp,
        )  # fmt: skip
        doc = json.loads(Path(f"{tmp}/runs/try.json").read_text())
    rows = doc["tried"]
    return dict(rows[0]) if rows else {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-r", "--reps", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("examples", nargs="*", help="a subset of the cases")
    args = p.parse_args()
    print("| example | fix tried | try speedup (99% interval) | code fix | try / code fix |")
    print("|---|---|---:|---:|---:|")
    for example, finding, flags in CASES:
        if args.examples and example not in args.examples:
            continue
        row = tried(example, finding, args.steps)
        ratios = []
        for _ in range(args.reps):
            before = own_median(example, [])
            after = own_median(example, flags)
            ratios.append(before / after)
        code = statistics.median(ratios)
        speedup, interval = row.get("speedup"), row.get("interval")
        if not isinstance(speedup, float) or not isinstance(interval, list):
            print(
                f"| {example} | {row.get('fix', '-')} | {row.get('error') or row.get('cannot')} | ×{code:.2f} | - |"
            )
            continue
        low, high = interval
        print(
            f"| {example} | {row['fix']} | ×{speedup:.2f} ({low:.2f}–{high:.2f}) | ×{code:.2f} | "
            f"{speedup / code:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
