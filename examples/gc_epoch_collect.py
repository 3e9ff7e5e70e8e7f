"""host.gc -- a full garbage collection at every epoch end, over everything start-up created.

Planted: start-up builds a large graph of small Python objects (as importing a big library, reading a
vocabulary or a knowledge graph into dicts does: ~1.5 million objects that live for the whole run), and
the training loop calls ``gc.collect()`` at the end of every short epoch, "to free memory", as some
training libraries do. Each call walks every tracked object: a stall of many steps' worth, one step in
eight.

Fix (``--fix``): no ``gc.collect()`` at epoch ends (CPython collects on its own, generation by
generation). ``--freeze`` keeps the calls and runs ``gc.freeze()`` once after start-up instead: what
start-up made moves to the permanent generation, which collections skip, and each call becomes cheap.

The step time this prints is the mean over the steady steps (``mean_step_ms``): the median step never
holds a collection.
"""
import argparse
import gc
import statistics
import time

import torch
from torch import nn

PLANTED = ["host.gc"]
E2E_STEPS = 64

EPOCH_STEPS = 8


def start_up(n):
    """A long-lived object graph, like a library's registries or a dataset's vocabulary."""
    vocab = {f"token{i}": [i, str(i), (i, i + 1)] for i in range(n)}
    return vocab


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="no gc.collect() at epoch ends")
    p.add_argument("--freeze", action="store_true", help="gc.freeze() after start-up (the calls stay)")
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--objects", type=int, default=300_000)
    args = p.parse_args()

    torch.manual_seed(0)
    vocab = start_up(args.objects)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
    if args.freeze:
        gc.freeze()

    times = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (i + 1) % EPOCH_STEPS == 0 and not args.fix:
            gc.collect()  # the epoch's end
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1

    steady = times[3:]
    print(f"steps={len(times)} objects={len(vocab)} mean_step_ms={statistics.fmean(steady) * 1000:.3f} "
          f"median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
