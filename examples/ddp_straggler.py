"""imbalance.straggler -- data-parallel training where one rank's data arrives late and every rank waits.

Run with two ranks on CPU (gloo):  torchrun --nproc_per_node=2 examples/ddp_straggler.py

Planted: rank 1 reads its shard from slow storage: each of its samples costs a round-trip
(``--latency-ms``, default 0.75 ms per sample, emulated with a sleep) and it loads in the training
process (``num_workers=0``), while rank 0's shard is in memory.  DDP all-reduces the gradients
during backward, so each step rank 0 reaches the all-reduce first and waits inside backward
until rank 1 has loaded its batch and caught up: both ranks run at rank 1's pace.  Each rank
uses one intra-op thread (two ranks on two cores).

Fix (``--fix``): rank 1 reads from the same fast storage (its shard cached in memory); the ranks
are balanced and neither waits.

Only rank 0 prints the result line ``steps=N median_step_ms=X`` (its own step times; under DDP the
ranks move in lockstep).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, RandomSampler

PLANTED = ["imbalance.straggler"]
LAUNCH = "torchrun --nproc_per_node=2"
"""How the e2e tests and measure_truth.py run it."""


class ShardDataset(Dataset):
    """One rank's shard; on slow storage every sample read pays a round-trip."""

    def __init__(self, n, seq, dim, classes, latency_s, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, seq, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.latency_s = latency_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.latency_s:
            time.sleep(self.latency_s)  # emulated network-filesystem round-trip
        return self.x[i], self.y[i]


class SeqClassifier(nn.Module):
    def __init__(self, d, classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.GELU())
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.net(x).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="rank 1 reads its shard from fast storage too")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--latency-ms", type=float, default=0.75)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    slow = rank == 1 and not args.fix
    seq, dim, classes = 64, 128, 10
    ds = ShardDataset(1024, seq, dim, classes, args.latency_ms / 1000 if slow else 0.0, seed=rank)
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = DistributedDataParallel(SeqClassifier(dim, classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        if len(times) >= args.steps:
            break

    dist.barrier()
    dist.destroy_process_group()
    # torch 2.13's gloo worker thread frees the last collective after it has completed, and needs the
    # GIL to do it; a process that exits in that moment aborts ("terminate called without an active
    # exception": 3 of 14 plain runs of a 2-rank DDP loop here). A short sleep lets the thread finish.
    time.sleep(0.05)
    if rank == 0:
        steady = times[3:] if len(times) > 3 else times
        print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
