"""input.worker_restart -- DataLoader workers started again at every epoch, each opening its data anew.

In the style of a dataset kept in a shard file (HDF5, LMDB, a memory-mapped index) that each process
opens lazily on its first read -- the usual way to share such a file with DataLoader workers. Without
``persistent_workers=True`` the workers exit at the end of every epoch; the next epoch forks new ones,
and each pays the open again before its first batch. The epochs are short (a fine-tuning set, a few
dozen batches), so the first step of every epoch waits for that.

Planted: ``num_workers=2`` without ``persistent_workers``, and an open of ``--open-ms`` (250 ms,
emulated latency of a remote file's index) in each worker's first ``__getitem__``.

Fix (``--fix``): ``persistent_workers=True``: the workers, and their open files, live for the whole run.

Each epoch's first step carries the cost, which the median step never shows: the row compares
``mean_step_ms``, the mean over every step of the run.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

PLANTED = ["input.worker_restart"]


class ShardDataset(Dataset):
    """Samples read from a shard whose index each process opens on its first read."""

    def __init__(self, n, dim, classes, open_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.open_s = open_s
        self.index = None

    def __len__(self):
        return len(self.x)

    def _open(self):
        time.sleep(self.open_s)  # emulated: fetch and parse the shard's index
        self.index = torch.arange(len(self.x))

    def __getitem__(self, i):
        if self.index is None:
            self._open()
        return self.x[self.index[i]], self.y[i]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep the workers alive between epochs")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batches", type=int, default=24, help="batches per epoch")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--open-ms", type=float, default=250.0)
    args = p.parse_args()

    torch.manual_seed(0)
    dim, classes = 512, 10
    ds = ShardDataset(args.batches * args.batch_size, dim, classes, args.open_ms / 1000)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=2,
                        persistent_workers=args.fix)
    model = nn.Sequential(nn.Linear(dim, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, classes))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    times = []
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1

    print(f"steps={len(times)} median_step_ms={statistics.median(times) * 1000:.3f} "
          f"mean_step_ms={statistics.fmean(times) * 1000:.3f}")


if __name__ == "__main__":
    main()
