"""What each way of recording a CPU program's ops costs: per op, and on a training step.

    .venv/bin/python benchmarks/op_recorders.py [--rounds 8] [--steps 120]

Part 1, per op: a loop of 20,000 `torch.add` on 16×16 tensors (one thread), bare and under each
recorder torch 2.13 offers to Python: a no-op `TorchDispatchMode` (the floor of any dispatch-mode
recorder), pinchpoint's op census, `torch.profiler` (Kineto) with shapes (with and without recording
scalar arguments' values, "concrete inputs"), and the `ExecutionTraceObserver`. Best of 3, µs per op.

Part 2, on a step: `examples/healthy.py`'s model and loop (bf16 autocast, ~16 ms steps, ops averaging
~16 µs) in a fresh process per arm and round, with the recorder on for steps 40–42 of `--steps`. Each
run's ratio is the median of the window's steps over the median of steps 5–39 (same process), and
after/before is the median of the steps after the window over the same. Arms run interleaved per round.
Reported: the median over rounds. The op window's target (issue 4) is ≤ 1.10 inside the window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("none", "census", "kineto", "kineto-no-concrete", "kineto-no-concrete+flops")
W0, WN = 40, 3


def per_op() -> dict[str, float]:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from pinchpoint.capture.opcensus import Census

    torch.set_num_threads(1)
    x = torch.randn(16, 16)

    def loop(n: int = 20_000) -> float:
        y = x
        t = time.perf_counter_ns()
        for _ in range(n):
            y = torch.add(y, x)
        return (time.perf_counter_ns() - t) / n / 1000

    class Noop(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    def noop() -> float:
        with Noop():
            return loop()

    def census() -> float:
        c = Census(torch)
        c.start()
        try:
            return loop()
        finally:
            c.stop()

    def kineto(concrete: bool) -> float:
        from torch.profiler import ProfilerActivity, profile

        torch._C._profiler._set_record_concrete_inputs_enabled_val(concrete)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            r = loop()
        torch._C._profiler._set_record_concrete_inputs_enabled_val(True)
        return r

    def et() -> float:
        import os
        import tempfile

        from torch.profiler import ExecutionTraceObserver

        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        o = ExecutionTraceObserver().register_callback(path)
        o.start()
        try:
            return loop()
        finally:
            o.stop()
            o.unregister_callback()
            os.unlink(path)

    arms = {
        "bare": loop, "dispatch mode (no-op)": noop, "op census": census,
        "Kineto, shapes": lambda: kineto(True), "Kineto, shapes, no concrete inputs": lambda: kineto(False),
        "ExecutionTraceObserver": et,
    }  # fmt: skip
    loop()  # warm
    return {name: min(f() for _ in range(3)) for name, f in arms.items()}


def step_run(arm: str, steps: int) -> tuple[float, float]:
    """One process: (window / before, after / before) for `arm`."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", arm, "--steps", str(steps)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["window"], r["after"]


def child(arm: str, steps: int) -> None:
    import importlib.util

    import torch
    from torch import nn

    spec = importlib.util.spec_from_file_location("healthy", ROOT / "examples" / "healthy.py")
    assert spec is not None and spec.loader is not None
    h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(h)
    h.keep_freed_memory()
    torch.manual_seed(0)
    seq, dim, classes, bs = 64, 256, 100, 32
    xs, ys = torch.randn(2048, seq, dim), torch.randint(0, classes, (2048,))
    model = h.SeqClassifier(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    idx = torch.randint(0, 2048, (steps, bs))
    rec: list[object] = []

    def start() -> None:
        if arm == "census":
            from pinchpoint.capture.opcensus import Census

            c = Census(torch)
            c.start()
            rec.append(c)
        elif arm.startswith("kineto"):
            from torch.profiler import ProfilerActivity, profile

            if "no-concrete" in arm:
                torch._C._profiler._set_record_concrete_inputs_enabled_val(False)
            p = profile(
                activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=arm.endswith("flops")
            )
            p.__enter__()
            rec.append(p)

    def stop() -> None:
        for r in rec:
            if arm == "census":
                r.stop()  # type: ignore[attr-defined]
            else:
                r.__exit__(None, None, None)  # type: ignore[attr-defined]

    times = []
    t0 = time.perf_counter()
    for s in range(steps):
        if s == W0:
            start()
        if s == W0 + WN:
            stop()
            t0 = time.perf_counter()  # the recorder's own stop is not a step's time
        x, y = xs[idx[s]], ys[idx[s]]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    before = statistics.median(times[5:W0])
    window = statistics.median(times[W0 : W0 + WN]) / before
    after = statistics.median(times[W0 + WN + 3 :]) / before
    print(json.dumps({"window": window, "after": after}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    print("Per op (µs, best of 3; torch.add on 16×16, one thread):")
    for name, us in per_op().items():
        print(f"  {name:36s} {us:5.2f}")
    print(
        f"\nOn a training step (examples/healthy.py's loop; {args.rounds} rounds, steps {W0}-{W0 + WN - 1} recorded):"
    )
    results: dict[str, list[tuple[float, float]]] = {a: [] for a in ARMS}
    for i in range(args.rounds):
        for arm in ARMS:
            results[arm].append(step_run(arm, args.steps))
        print(f"  round {i + 1}: " + ", ".join(f"{a} {results[a][-1][0]:.3f}" for a in ARMS), flush=True)
    for arm, rs in results.items():
        w = sorted(r[0] for r in rs)
        a = statistics.median(r[1] for r in rs)
        print(
            f"  {arm:26s} window/before median {statistics.median(w):.3f} (range {w[0]:.3f}-{w[-1]:.3f}), after/before {a:.3f}"
        )


if __name__ == "__main__":
    main()
