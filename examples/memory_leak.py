"""memory.leak -- host memory grows step after step until the job is killed.

Planted: the loop keeps per-step results "for the end-of-epoch report" as live
tensors: ``history.append(loss)`` and ``epoch_logits.append(logits)``.  Both still
carry their autograd graph (``grad_fn``), so every step pins the bf16 logits of a
1000-way per-token head (32x32x1000 -> 2 MB) plus graph nodes and the small
tensors they reference; RSS climbs by several MB per step and never comes back.

Fix (``--fix``): keep Python numbers instead of tensors -- ``history.append(loss.item())``
and a running correct-count (``(pred == y).sum().item()``) -- so nothing from a
step outlives it.  Step time barely changes; the growth goes away.  The final line
carries an extra token ``rss_growth_mb`` = RSS after the last step minus RSS after
step 3 (psutil, sampled every step).

Like healthy.py, it tells glibc to keep freed memory (mallopt at start-up, the allocator_churn.py
fix), so the only memory story here is the leak: without it the program also loses ~15% of its step
to page faults, which pinchpoint reports as memory.pressure.
"""
import argparse
import statistics
import time

import psutil
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from healthy import keep_freed_memory

PLANTED = ["memory.leak"]

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


class Tagger(nn.Module):
    def __init__(self, d, n_blocks, classes):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep Python floats/ints, not tensors")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()
    keep_freed_memory()  # the tuned glibc setup healthy.py uses

    torch.manual_seed(0)
    seq, dim, classes, n = 32, 256, 1000, 2048
    ds = InMemoryBatches(torch.randn(n, seq, dim), torch.randint(0, classes, (n, seq)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True),
                        batch_size=None, num_workers=0)
    model = Tagger(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    proc = psutil.Process()
    history, epoch_logits, epoch_targets, correct = [], [], [], 0

    times, rss = [], []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, classes), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix:
            history.append(loss.item())
            correct += (logits.detach().argmax(-1) == y).sum().item()
        else:
            history.append(loss)  # keeps the graph alive
            epoch_logits.append(logits)  # ... and the logits, for an end-of-epoch accuracy
            epoch_targets.append(y)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        rss.append(proc.memory_info().rss)
        t0 = t1
        if len(times) >= args.steps:
            break

    if not args.fix:
        correct = sum((lg.argmax(-1) == t).sum().item() for lg, t in zip(epoch_logits, epoch_targets, strict=True))
    mean_loss = sum(v.item() if torch.is_tensor(v) else v for v in history) / len(history)
    print(f"mean loss {mean_loss:.3f}, accuracy {correct / (len(history) * args.batch_size * seq):.4f}",
          file=__import__("sys").stderr)
    steady = times[3:] if len(times) > 3 else times
    growth = (rss[-1] - rss[min(3, len(rss) - 1)]) / 2**20
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f} rss_growth_mb={growth:.1f}")


if __name__ == "__main__":
    main()
