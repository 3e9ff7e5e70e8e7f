"""allocator_churn -- glibc hands the step's big buffers back to the OS, and page-faults them in again.

A token-tagging encoder (embedding, feed-forward blocks, per-token classifier) trained under bf16
autocast with sequences of 128 tokens. Its activations and gradients are 8-16 MiB each. glibc's
malloc serves such blocks from fresh mmaps or trims them off the top of its heap when they are freed,
so every step the kernel maps and zeroes tens of MiB again, one 4 KiB page fault at a time, on the
threads that should be computing. Nothing in the Python code looks wrong.

Planted: memory.pressure (allocator churn).  ``--fix`` raises glibc's mmap and trim thresholds at
start-up (mallopt, the in-process equivalent of ``MALLOC_MMAP_THRESHOLD_=33554432
MALLOC_TRIM_THRESHOLD_=1073741824`` in the environment, or preloading jemalloc/tcmalloc), so freed
memory stays in the process and is reused without faults.
"""

import argparse
import ctypes
import os
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = ["memory.pressure"]

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameter numbers


def keep_freed_memory():
    """What the fix changes: glibc keeps freed blocks for reuse instead of returning them to the OS."""
    libc = ctypes.CDLL("libc.so.6")
    ok = libc.mallopt(M_MMAP_THRESHOLD, 32 << 20) and libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    if not ok:
        print("mallopt failed", file=sys.stderr)


class Tokens(Dataset):
    def __init__(self, ids, tags):
        self.ids, self.tags = ids, tags

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, idx):
        return self.ids[idx], self.tags[idx]


class FeedForward(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class Tagger(nn.Module):
    def __init__(self, vocab, d, n_blocks, tags):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[FeedForward(d) for _ in range(n_blocks)])
        self.out = nn.Linear(d, tags)

    def forward(self, ids):
        return self.out(self.blocks(self.embed(ids)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep freed memory in the process (mallopt)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=16)
    args = p.parse_args()
    if args.fix:
        keep_freed_memory()

    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    vocab, seq, dim, n_tags = 8000, 128, 256, 17
    n = 1024
    ds = Tokens(torch.randint(0, vocab, (n, seq)), torch.randint(0, n_tags, (n, seq)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(
        ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True), batch_size=None, num_workers=0
    )
    model = Tagger(vocab, dim, 2, n_tags)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    times = []
    t0 = time.perf_counter()
    for ids, tags in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids)
            loss = loss_fn(logits.reshape(-1, n_tags), tags.reshape(-1))
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
