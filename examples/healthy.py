"""healthy -- a compute-bound bf16 training loop with nothing planted.

Transformer-style feed-forward blocks trained with bf16 autocast (mixed precision),
data in memory behind a cheap DataLoader (one batched index per step, no workers),
default thread count, no per-step Python work, no checkpointing, and glibc's allocator told to
keep freed memory for reuse (what `allocator_churn.py --fix` does; without it glibc page-faults
this program's activations in again every step, ~15% of the step here).  Nearly all of the step
is forward/backward matmuls and their elementwise neighbours.

``--fix`` is accepted and does nothing (there is nothing to fix).
"""

import argparse
import ctypes
import os
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = []

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16, and its matmuls run ~40x slower than fp32 (seen on an AVX2 EPYC).
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


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


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameter numbers


def keep_freed_memory():
    """A tuned CPU setup: glibc keeps freed blocks for reuse instead of returning them to the OS
    (the in-process form of MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)


def parse_args(description, fix_help):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--fix", action="store_true", help=fix_help)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=32)
    return p.parse_args()


def main():
    args = parse_args(__doc__.splitlines()[0], "no-op: nothing is planted")
    keep_freed_memory()
    train(args)


def train(args):
    """The training loop; prints `steps=N median_step_ms=X`."""
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
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
