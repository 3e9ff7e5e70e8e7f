"""io.checkpoint -- a full checkpoint every few steps, whose cost outlasts the save.

Planted: every ``--ckpt-every`` steps (default 8) the loop saves the model and its AdamW state
(~150 MB) with ``torch.save`` to a file on disk, as many training scripts do "to be safe". The
save itself blocks the step for a while; then the kernel writes the dirty pages back while the next
steps run, and on a machine with few cores that write-back takes CPU and memory bandwidth from
them: the steps right after a save run slower than the others. A price that counts only the time
inside ``torch.save`` misses that part (a held-out program: the saves' own time priced x1.71, removing
them measured x3.79).

Fix (``--fix``): save every ``--fix-every`` steps (default 100) and once after the last step.

The step time this prints is the mean over the steady steps (``mean_step_ms``): with a save every
few steps the median step never holds one, and the run's time is the mean.
"""
import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn

PLANTED = ["io.checkpoint"]
LOADED = "shrinks(checkpoint_io): beside a busy process the compute stretches while the save's cost stays"
E2E_STEPS = 48
"""Steps the end-to-end tests run: six saves (eight steps apart), the op window and the trials between."""

BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="save every --fix-every steps, not every --ckpt-every")
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--ckpt-every", type=int, default=8)
    p.add_argument("--fix-every", type=int, default=100)
    args = p.parse_args()

    torch.manual_seed(0)
    dim, blocks, tokens = 512, 6, 128
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)], nn.Linear(dim, dim))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    every = args.fix_every if args.fix else args.ckpt_every
    ckpt_dir = tempfile.mkdtemp(prefix="pinchpoint_ckpt_", dir=os.environ.get("CKPT_DIR"))
    ckpt_path = os.path.join(ckpt_dir, "last.pt")
    x, target = torch.randn(tokens, dim), torch.randn(tokens, dim)

    times = []
    t0 = time.perf_counter()
    for i in range(args.steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            loss = nn.functional.mse_loss(model(x).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step = i + 1
        if step % every == 0 or step == args.steps:
            torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt_path)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1

    os.remove(ckpt_path)
    os.rmdir(ckpt_dir)
    steady = times[3:-1] if len(times) > 4 else times  # (the last step's save is the fix's too)
    print(f"steps={len(times)} mean_step_ms={statistics.fmean(steady) * 1000:.3f} "
          f"median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
