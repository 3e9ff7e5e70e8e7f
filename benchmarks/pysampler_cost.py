"""In-process cost of pinchpoint's default stack sampler (`capture/pysampler.py`), without the noise
between processes.

    .venv/bin/python benchmarks/pysampler_cost.py [--blocks 40] [--rate 20]

One process runs three workloads, each in blocks of ~0.25 s that alternate (ABBA) between the sampler
thread running and stopped: pure Python (a metrics loop over lists, the sampler's worst case: it takes
the GIL from running Python code), small torch ops (dispatch-bound, the GIL let go at each op) and a
small MLP's training step. Prints, per workload, the mean block with and without and the paired median
ratio (with / without).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def workloads() -> dict[str, Callable[[], None]]:
    import torch

    data = [[float(i % 97), float(i % 13)] for i in range(2000)]

    def python() -> None:
        total = 0.0
        for a, b in data:
            total += a * b if a > b else a - b

    small = torch.randn(16, 16)

    def dispatch() -> None:
        x = small
        for _ in range(60):
            x = (x * 0.5 + 0.1).relu()

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    xb, yb = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def train() -> None:
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return {"pure Python": python, "small torch ops": dispatch, "MLP train step": train}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=40, help="blocks per workload (half with the sampler)")
    ap.add_argument("--rate", type=float, default=20.0, help="samples per second")
    args = ap.parse_args()
    from pinchpoint.capture.pysampler import PySampler

    with tempfile.TemporaryDirectory() as tmp:
        for name, work in workloads().items():
            t = time.perf_counter()
            reps = 0
            while time.perf_counter() - t < 0.25:
                work()
                reps += 1

            def block(on: bool, reps: int = reps, work: Callable[[], None] = work) -> float:
                sampler = PySampler(Path(tmp), args.rate) if on else None
                if sampler is not None:
                    sampler.start()
                t0 = time.perf_counter()
                for _ in range(reps):
                    work()
                took = time.perf_counter() - t0
                if sampler is not None:
                    sampler.stop_event.set()
                    sampler.join()
                return took

            on_times, off_times = [], []
            for i in range(args.blocks // 4):
                for on in (True, False, False, True) if i % 2 == 0 else (False, True, True, False):
                    (on_times if on else off_times).append(block(on))
            ratios = [a / b for a, b in zip(on_times, off_times, strict=True)]
            print(
                f"{name:16s} with {1e3 * statistics.fmean(on_times):7.1f} ms, without "
                f"{1e3 * statistics.fmean(off_times):7.1f} ms a block: median ratio {statistics.median(ratios):.4f} "
                f"({len(ratios)} pairs)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
