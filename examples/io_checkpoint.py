"""io.checkpoint -- a synchronous full checkpoint is written inside the training loop every step.

Planted: after every optimizer step the loop calls ``torch.save`` on the model *and*
AdamW state (~29 MB: weights + two moment buffers) into a temporary directory.
The save is synchronous -- serialising and writing the file blocks the training
thread -- and costs about a third of the step (two thirds as much as forward+backward).

Fix (``--fix``): checkpoint every ``--ckpt-every`` steps (default 100) plus once
after the last step.  That bounds the work lost to a crash at 100 steps while
making the amortised save cost ~1% of a step.  (In the timed loop the fixed
version saves at step 100 and at the final step; the median ignores both.)
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = ["io.checkpoint"]
LOADED = "shrinks(checkpoint_io): the save costs the same per step while, beside a busy process, the compute stretches several-fold (two intra-op threads wait at barriers for the core it holds)"
E2E_STEPS = 32
"""Steps the end-to-end tests run (a full checkpoint every step: 0.8 s a step here)."""

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
    p.add_argument("--fix", action="store_true", help="checkpoint every --ckpt-every steps, not every step")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--ckpt-every", type=int, default=100)
    args = p.parse_args()

    torch.manual_seed(0)
    seq, dim, classes, n = 64, 384, 100, 2048
    ds = InMemoryBatches(torch.randn(n, seq, dim), torch.randint(0, classes, (n,)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, sampler=BatchSampler(sampler, args.batch_size, drop_last=True),
                        batch_size=None, num_workers=0)
    model = SeqClassifier(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    every = args.ckpt_every if args.fix else 1
    ckpt_dir = tempfile.mkdtemp(prefix="pinchpoint_ckpt_")
    ckpt_path = os.path.join(ckpt_dir, "last.pt")

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step = len(times) + 1
        if step % every == 0 or step == args.steps:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt_path)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        if len(times) >= args.steps:
            break

    os.remove(ckpt_path)
    os.rmdir(ckpt_dir)
    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
