"""allocator_churn -- glibc hands the step's big buffers back to the OS, and page-faults them in again.

The same bf16 sequence classifier as healthy.py (feed-forward blocks, d=256, 64 tokens, batch 32,
in-memory data), with one difference: glibc's malloc runs with its default settings. The step's
activations and gradients are 2-8 MiB each; glibc serves such blocks from fresh mmaps or trims them off
the top of its heap when they are freed, so every step the kernel maps and zeroes ~12-24 MiB again, one
4 KiB page fault at a time, on the threads that should be computing. Nothing in the Python code looks
wrong, and no framework profiler shows it: the time hides inside the ops that first touch the memory.

Planted: memory.pressure (allocator churn).  ``--fix`` raises glibc's mmap and trim thresholds at
start-up (mallopt, the in-process equivalent of ``MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=1073741824`` in the environment, or of preloading jemalloc/tcmalloc), so freed
memory stays in the process and is reused without faults -- exactly what healthy.py does.
"""
import argparse
import ctypes
import os
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = ["memory.pressure"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameter numbers


class InMemoryBatches(Dataset):
    """Tensors in RAM; indexed with a whole batch of indices at once (cheap loader)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


class SeqClassifier(nn.Module):
    def __init__(self, d, n_blocks, classes):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="no-op: nothing is planted")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    if args.fix:  # the fix: freed blocks stay in the process for reuse (mallopt(3))
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
        libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)

    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)))  # the default, made explicit
    seq, dim, classes = 64, 256, 100
    n = 2048  # distinct samples held in RAM; sampled with replacement
    ds = InMemoryBatches(torch.randn(n, seq, dim), torch.randint(0, classes, (n,)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(
        ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True), batch_size=None, num_workers=0
    )
    model = SeqClassifier(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        if len(times) >= args.steps:
            break

    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
