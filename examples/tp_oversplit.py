"""comm.tensor_parallel -- a small model split by tensor parallelism over many tokens: its per-layer
all-reduces move more than data parallelism's gradients would.

Run with two ranks on CPU (gloo):  torchrun --nproc_per_node=2 examples/tp_oversplit.py

Planted: a stack of MLP blocks (256 -> 1024 -> 256) split over both ranks with tensor parallelism
(``parallelize_module``: the up projection ``ColwiseParallel``, the down projection ``RowwiseParallel``).
Every block's forward all-reduces its output (tokens x 256 floats) and its backward the input's
gradient (as many): with 4096 tokens a step, 8 MiB a block, where the block's weights are 2 MiB. The
model fits one rank many times over; tensor parallelism only pays where weights do not fit or
activations are small.

Fix (``--fix``): data parallelism over the same two ranks (DDP, each rank half the tokens, the same
global batch and update): one all-reduce of the gradients a step, 2 MiB a block, overlapped with
backward.

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
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

PLANTED = ["comm.tensor_parallel"]
LAUNCH = "torchrun --nproc_per_node=2"
"""How the e2e tests and measure_truth.py run it."""
E2E_STEPS = 24
"""Steps in the end-to-end tests."""
# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16 and its matmuls run far slower than fp32.
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="data parallelism instead of tensor parallelism")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--hidden", type=int, default=1024)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    dim, hidden = 256, args.hidden
    model = nn.Sequential(*[Block(dim, hidden) for _ in range(args.blocks)])
    g = torch.Generator().manual_seed(0)  # every rank the same global batch
    data = torch.randn(8 * args.tokens, dim, generator=g)
    target = torch.randn(8 * args.tokens, dim, generator=g)
    if args.fix:
        model = DistributedDataParallel(model)
        share = args.tokens // world
        rows = slice(rank * share, (rank + 1) * share)  # this rank's half of each batch
    else:
        mesh = init_device_mesh("cpu", (world,))
        for block in model:
            parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        rows = slice(0, args.tokens)  # tensor parallelism: every rank the whole batch
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    times = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        i = (step % 8) * args.tokens
        x, y = data[i : i + args.tokens][rows], target[i : i + args.tokens][rows]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            loss = nn.functional.mse_loss(model(x).float(), y)
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
