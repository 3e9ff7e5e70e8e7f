"""compute.memory -- a hand-written activation: a chain of elementwise ops, each a trip through memory.

Planted: the feed-forward blocks use the tanh approximation of GELU written out in tensor ops
(``0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h**3)))``), the way many model codebases
carry it (e.g. "NewGELU" activations).  Each of its ~9 ops reads and writes the whole hidden
activation, and autograd saves the intermediates and runs ~15 more elementwise ops backward:
the step is dominated by memory traffic on tensors far larger than the matmuls' work needs.
The blocks are narrow (d=64, hidden 256) and the sequence long, as in a small sequence model.
Data is in memory, the loader is cheap, the model runs in fp32 with its matmuls a small part.

Fix (``--fix``): ``torch.nn.functional.gelu(h, approximate="tanh")`` -- the same function as one
fused kernel (one read, one write; its backward is one kernel too).

``--bf16`` runs forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (with or
without ``--fix``): on a CPU with native bf16 the matmuls run faster and the chain reads and writes
half the bytes (the linear layers' outputs are bf16), so there it is a second real fix; examples/TRUTH.md
measures it per machine kind.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from healthy import keep_freed_memory  # glibc keeps freed memory: the plant is traffic, not page faults

PLANTED = ["compute.memory"]
SQRT_2_OVER_PI = 0.7978845608028654


class InMemoryBatches(Dataset):
    """Tensors in RAM; indexed with a whole batch of indices at once (cheap loader)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


def gelu_written_out(h):
    return 0.5 * h * (1.0 + torch.tanh(SQRT_2_OVER_PI * (h + 0.044715 * h * h * h)))


class Block(nn.Module):
    def __init__(self, d, hidden, fused):
        super().__init__()
        self.fc1, self.fc2, self.fused = nn.Linear(d, hidden), nn.Linear(hidden, d), fused

    def forward(self, x):
        h = self.fc1(x)
        h = nn.functional.gelu(h, approximate="tanh") if self.fused else gelu_written_out(h)
        return x + self.fc2(h)


class SeqClassifier(nn.Module):
    def __init__(self, d, hidden, n_blocks, classes, fused):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d, hidden, fused) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="one fused GELU kernel instead of the written-out chain")
    p.add_argument("--bf16", action="store_true", help="forward and loss under bf16 autocast")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    keep_freed_memory()

    torch.manual_seed(0)
    seq, dim, hidden, classes = 512, 64, 256, 10
    n = 512  # distinct samples held in RAM; sampled with replacement
    ds = InMemoryBatches(torch.randn(n, seq, dim), torch.randint(0, classes, (n,)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True),
                        batch_size=None, num_workers=0)
    model = SeqClassifier(dim, hidden, 2, classes, fused=args.fix)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
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
