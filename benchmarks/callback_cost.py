"""What pinchpoint's framework callbacks cost a step, measured inside the run that uses them.

    .venv/bin/python benchmarks/callback_cost.py [--steps 150] [lightning_fit|hf_trainer ...]

Runs each framework example under `pinchpoint run` with its `--callback` (and `--fix`: compute-bound
steps, where a per-step cost shows), with every per-step method of pinchpoint's callback
(`LightningCallback.on_train_batch_end`, `TransformersCallback.on_step_end`, and the evaluation ones)
wrapped in a clock. Prints, per example, the median time a step spends inside the callback against
the program's own median step. Between processes a 2% cost is under the noise here (A/A rounds of
`overhead.py --arm callback` read 0.86-1.20 on `lightning_fit.py`); inside one run it is not.
What the default mode's hooks cost is `overhead.py`'s and `hooks_inprocess.py`'s to measure: the
callback replaces the optimizer hook's step end with its own, it does not add one.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHILD = "--child"
METHODS = {
    "lightning_fit": ("pinchpoint.integrations.lightning", "LightningCallback",
                      ["on_train_batch_end", "on_validation_batch_end"]),
    "hf_trainer": ("pinchpoint.integrations.transformers", "TransformersCallback",
                   ["on_step_end", "on_prediction_step"]),
}  # fmt: skip


def child(example: str, argv: list[str]) -> None:
    """Inside `pinchpoint run`: wrap the callback's per-step methods, run the example's main()."""
    import atexit
    import importlib
    import time

    module, cls_name, methods = METHODS[example]
    cls = getattr(importlib.import_module(module), cls_name)
    spent: list[int] = []

    def clocked(fn):  # type: ignore[no-untyped-def]
        def wrapper(*a, **kw):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter_ns()
            try:
                return fn(*a, **kw)
            finally:
                spent.append(time.perf_counter_ns() - t0)

        return wrapper

    for name in methods:
        setattr(cls, name, clocked(getattr(cls, name)))
    atexit.register(lambda: print(f"callback_ns={statistics.median(spent[3:]) if len(spent) > 3 else 0}"))
    sys.path.insert(0, str(ROOT / "examples"))
    sys.argv = [example, *argv]
    importlib.import_module(example).main()


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(sys.argv[2], sys.argv[3:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", default=list(METHODS))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    pinchpoint = str(Path(sys.executable).with_name("pinchpoint"))
    for ex in args.examples:
        costs, steps = [], []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [pinchpoint, "run", "-q", "-o", f"{tmp}/run", __file__, CHILD, ex,
                       "--steps", str(args.steps), "--fix", "--callback"]  # fmt: skip
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
            costs.append(float(re.search(r"callback_ns=([0-9.]+)", out).group(1)) / 1e6)  # type: ignore[union-attr]
            steps.append(float(re.search(r"median_step_ms=([0-9.]+)", out).group(1)))  # type: ignore[union-attr]
        c, s = statistics.median(costs), statistics.median(steps)
        print(
            f"{ex:16} callback {c * 1000:7.1f} µs per step  step {s:7.2f} ms  cost {c / s:.4%} "
            f"(runs: {', '.join(f'{x * 1000:.0f} µs' for x in costs)})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
