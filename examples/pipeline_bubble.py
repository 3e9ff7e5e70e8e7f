"""pipeline.bubble -- a 2-stage pipeline (GPipe) fed its batch whole: each stage idles half the step.

Run with ``torchrun --nproc_per_node=2 examples/pipeline_bubble.py``. A feed-forward model of 8 blocks is
split in two stages (``torch.distributed.pipelining``: ``PipelineStage`` + ``ScheduleGPipe``, gloo, one
intra-op thread a rank, bf16 autocast where the CPU has it). Each step splits its batch of 1024 into
``--microbatches`` (planted: 1, ``n_microbatches=1``).

Planted: with p stages and m microbatches a GPipe step takes m + p - 1 microbatch slots, of which each
stage works m: with p = 2, m = 1, stage 1 waits for stage 0's forward and stage 0 for stage 1's
backward, half the step (the bubble, (p - 1)/(m + p - 1)).

Fix (``--fix``): 2 microbatches of 512 rows (the same batch): the bubble is a third of the step. More
did not pay on a 2-core CPU: 4 measured as 2 did, 8 slower (each microbatch's transfer runs on gloo's
threads, which share the cores the stages compute on, and its weight gradients are accumulated again).
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

PLANTED = ["pipeline.bubble"]
LAUNCH = "torchrun --nproc_per_node=2"
# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16 and its matmuls run far slower than fp32.
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
E2E_STEPS = 20
"""Steps the end-to-end tests run."""


def block(d):
    return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="2 microbatches per step instead of 1")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--microbatches", type=int, default=None)
    args = p.parse_args()
    m = args.microbatches or (2 if args.fix else 1)

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    d, batch, blocks = 512, 1024, 8
    per = blocks // world
    model = nn.Sequential(*[block(d) for _ in range(blocks)])
    stage_mod = nn.Sequential(*list(model)[rank * per : (rank + 1) * per])
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=1e-3)

    times = []
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x, y = torch.randn(batch, d), torch.randn(batch, d)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=y)
        opt.step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0 and os.environ.get("LOCAL_RANK", "0") == "0":
        steady = times[3:] if len(times) > 3 else times
        print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f} microbatches={m}")


if __name__ == "__main__":
    main()
