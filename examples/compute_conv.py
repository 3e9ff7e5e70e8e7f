"""compute.math -- a small CNN trained in fp32 on a CPU whose AMX units run bf16 convolutions.

Planted: three 3×3 convolutions (3→32→64, pool, 64→64) on 32×32 images, batch 32, in fp32 with
autocast off. Nearly the whole step is convolution forward and backward; oneDNN runs them in bf16 on
the AMX tiles a few times faster than in fp32 on the vector units.

Fix (``--fix``): forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``; the optimizer
step stays in fp32. Same model, same data. Both versions keep freed memory in the process (glibc's
mmap threshold raised, as `healthy.py` does): with glibc's defaults each step also page-faults its
activations back in (×1.20 more from the allocator alone here).
"""
import argparse
import statistics
import time

import torch
from torch import nn

from healthy import keep_freed_memory  # glibc keeps freed memory: the plant is the precision alone

PLANTED = ["compute.math"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="bf16 autocast around forward and loss")
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()

    keep_freed_memory()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    images, labels = torch.randn(256, 3, 32, 32, generator=g), torch.randint(0, 10, (256,), generator=g)
    times, t0 = [], time.perf_counter()
    for step in range(args.steps):
        i = (step * 32) % 256
        x, y = images[i : i + 32], labels[i : i + 32]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.fix):
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1

    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
