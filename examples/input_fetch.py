"""input.fetch -- the training loop waits for data whose loading is latency-bound.

Planted: ``RemoteShardDataset.__getitem__`` emulates fetching each sample from an
object store / network filesystem: it sleeps ``--latency-ms`` (default 1.0 ms) per
sample before returning it, and the DataLoader uses ``num_workers=0``.  Every step
therefore spends ~batch_size x latency (~35 ms) idle in ``DataLoader.__next__``
while the CPU does nothing -- the loader is *sleeping*, not computing.

Fix (``--fix``): ``num_workers=4, persistent_workers=True, prefetch_factor=2``.
The workers spend their time blocked on the emulated latency, so four of them
overlap it with the model's compute even on a 2-core machine.

The model (a bf16-autocast per-token MLP sequence classifier, ~2 M params) is the same in both versions.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

PLANTED = ["input.fetch"]

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16, and its matmuls run ~40x slower than fp32 (seen on an AVX2 EPYC).
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


class RemoteShardDataset(Dataset):
    """Feature vectors that 'live' on remote storage; each read pays a round-trip."""

    def __init__(self, n, seq, dim, classes, latency_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, seq, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.latency_s = latency_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.latency_s)  # emulated object-store / network round-trip
        return self.x[i], self.y[i]


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


class SeqClassifier(nn.Module):
    """Per-token MLP blocks (transformer-ish, no attention), mean-pool, linear head."""

    def __init__(self, d, n_blocks, classes):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="use 4 persistent DataLoader workers")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--latency-ms", type=float, default=1.0)
    args = p.parse_args()

    torch.manual_seed(0)
    seq, dim, classes = 32, 256, 100
    ds = RemoteShardDataset(2048, seq, dim, classes, args.latency_ms / 1000)
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    if args.fix:
        loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=4,
                            persistent_workers=True, prefetch_factor=2)
    else:
        loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=0)

    model = SeqClassifier(dim, 4, classes)
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
