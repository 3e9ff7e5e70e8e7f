"""input.preprocess -- an in-memory data set fetched one sample at a time, where workers make it worse.

Planted: the features and labels already sit in memory as tensors (``TensorDataset``), but the
DataLoader builds every batch of 32 the default way: 32 ``__getitem__`` calls (two tensor indexings
each) and a ``collate`` that stacks them again. The loop accumulates gradients over 4 batches a step.
Each batch costs ~0.15 ms of Python and dispatch in the training process, a large share of a step
whose model is small.

The tempting fix (``--workers N``) moves that work to DataLoader worker processes. Here it makes the
step slower: each batch must then be copied into shared memory by the worker and mapped back by the
training process, ~1 ms a batch on each side on the reference machine, far more than the fetch.

Fix (``--fix``): fetch whole batches with one indexing call. A ``BatchSampler`` is the sampler and
``batch_size=None``, so the DataLoader hands the dataset a list of 32 indices and ``TensorDataset``
indexes each tensor once with it: no per-sample calls, no collate. Same data, same order of work.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

PLANTED = ["input.preprocess"]
ACCUM = 4


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="fetch each batch with one indexing call")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers (the tempting fix)")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    torch.manual_seed(0)
    n, dim, classes = 8192, 256, 10
    data = TensorDataset(torch.randn(n, dim), torch.randint(0, classes, (n,)))
    sampler = RandomSampler(data, replacement=True, num_samples=args.steps * ACCUM * args.batch_size)
    if args.fix:
        loader = DataLoader(data, sampler=BatchSampler(sampler, args.batch_size, drop_last=False), batch_size=None)
    else:
        loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                            persistent_workers=args.workers > 0)

    model = nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times, t0 = [], time.perf_counter()
    for i, (x, y) in enumerate(loader):
        (nn.functional.cross_entropy(model(x), y) / ACCUM).backward()
        if (i + 1) % ACCUM == 0:
            opt.step()
            opt.zero_grad()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1

    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
