"""comm.exposed -- FSDP2 gathers every block's parameters twice a step: again in backward.

Run with two ranks on CPU (gloo):  torchrun --nproc_per_node=2 examples/fsdp_reshard.py

Planted: a stack of wide MLP blocks, each ``fully_shard``-ed (FSDP2) with the default
``reshard_after_forward=True``: after its forward a block frees the gathered parameters, and backward
all-gathers them again. The blocks are parameter-heavy and the micro-batch small, so the gathers cost
more than the compute they could hide behind, and twice a step.

Fix (``--fix``): ``reshard_after_forward=False``: the parameters stay gathered from forward to
backward (more memory: each rank holds the unsharded blocks through backward, as ZeRO-2 does); the
backward all-gathers go.

gloo's reduce-scatter sums where FSDP asks for an average (pytorch #162338): the model sums
(``set_force_sum_reduction_for_comms``) and divides itself, so the update is the one NCCL would give.
Only rank 0 prints the result line ``steps=N median_step_ms=X``.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

PLANTED = ["comm.exposed"]
LAUNCH = "torchrun --nproc_per_node=2"
"""How the e2e tests and measure_truth.py run it."""
E2E_STEPS = 24
"""Steps in the end-to-end tests (each takes ~0.4 s on 2 cores)."""


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self, dim, hidden, blocks, classes):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, hidden) for _ in range(blocks))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep parameters gathered until backward")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--blocks", type=int, default=4)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dim, hidden, classes = 1024, 2048, 10
    mesh = init_device_mesh("cpu", (world,))
    model = Net(dim, hidden, args.blocks, classes)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=not args.fix)
    fully_shard(model, mesh=mesh, reshard_after_forward=not args.fix)
    if hasattr(model, "set_force_sum_reduction_for_comms"):
        model.set_force_sum_reduction_for_comms(True)
        model.set_gradient_divide_factor(1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(rank)
    data = torch.randn(32 * args.batch, dim, generator=g)
    labels = torch.randint(0, classes, (32 * args.batch,), generator=g)

    times = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        i = step % 32
        x, y = data[i * args.batch : (i + 1) * args.batch], labels[i * args.batch : (i + 1) * args.batch]
        loss = loss_fn(model(x), y) / world  # (the gradients are summed over the ranks: an average)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1

    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.05)  # (gloo's worker thread frees the last collective: see comm_exposed.py)
    if rank == 0:
        steady = times[3:] if len(times) > 3 else times
        print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
