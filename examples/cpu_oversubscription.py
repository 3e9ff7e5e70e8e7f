"""cpu.oversubscription -- more runnable compute threads than CPU cores.

Planted: the script hard-codes ``torch.set_num_threads(16)`` (a value tuned on a big
workstation) and runs on a 2-core machine.  Every intra-op parallel region (matmul,
GELU, LayerNorm, optimizer) forks 16 OpenMP threads onto 2 cores: they time-slice,
spin-wait at barriers and evict each other's caches, so the same work takes much
longer than with 2 threads.  The model uses bf16 autocast so fp32 matmul is not a
second finding.

Fix (``--fix``): threads x processes <= cores, i.e.
``torch.set_num_threads(len(os.sched_getaffinity(0)))`` (2 here).
"""
import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = ["cpu.oversubscription"]
LOADED = "trial: beside a busy process 16 threads can beat 2 (they get a bigger share of the cores; the thread trial's steps at 2 threads took 480-970 ms against 360 ms at 16 here): the trial measures which, and no finding lowers them when it measured no gain"
"""What the e2e tests accept beside a busy process (tests/test_examples_e2e.py)."""

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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help='threads = usable cores')
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)) if args.fix else 16)
    seq, dim, classes = 64, 256, 100
    n = 2048  # distinct samples held in RAM; sampled with replacement
    ds = InMemoryBatches(torch.randn(n, seq, dim), torch.randint(0, classes, (n,)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True),
                        batch_size=None, num_workers=0)
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
