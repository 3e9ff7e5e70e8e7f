"""host.dispatch -- per-op framework overhead dominates: thousands of tiny ops per step.

Planted: ``GroupedMLP`` applies a separate small 2-layer MLP (16 -> 32 -> 16) to each
of 128 feature groups (think per-sensor / per-field sub-networks).  The slow version
loops over the groups in Python: every group does its own tiny matmul/add/GELU/
matmul/add on a (640 x 16) slice, so one training step issues ~3,400 aten ops
(forward, autograd backward and bf16 autocast casts; vs ~130 when batched), each
costing microseconds of dispatcher/autograd bookkeeping for very little math.

Fix (``--fix``): the same math (same parameters, same batch size) as two batched
``torch.baddbmm`` calls over all groups at once -- a couple of dozen ops per step.
Outputs match the loop version up to bf16 rounding.
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

PLANTED = ["host.dispatch"]

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


class GroupedMLP(nn.Module):
    def __init__(self, groups, k, hidden, classes, batched):
        super().__init__()
        self.batched = batched
        self.w1 = nn.Parameter(torch.randn(groups, k, hidden) / k**0.5)
        self.b1 = nn.Parameter(torch.zeros(groups, hidden))
        self.w2 = nn.Parameter(torch.randn(groups, hidden, k) / hidden**0.5)
        self.b2 = nn.Parameter(torch.zeros(groups, k))
        self.head = nn.Linear(groups * k, classes)

    def forward(self, x):  # x: (batch, groups, k)
        b = x.shape[0]
        if self.batched:
            xg = x.transpose(0, 1)  # (groups, batch, k)
            h = nn.functional.gelu(torch.baddbmm(self.b1.unsqueeze(1), xg, self.w1))
            out = torch.baddbmm(self.b2.unsqueeze(1), h, self.w2).transpose(0, 1)
        else:
            outs = []
            params = (self.w1.unbind(0), self.b1.unbind(0), self.w2.unbind(0), self.b2.unbind(0))
            for xg, w1, b1, w2, b2 in zip(x.unbind(1), *params, strict=True):
                h = nn.functional.gelu(xg @ w1 + b1)
                outs.append(h @ w2 + b2)
            out = torch.stack(outs, dim=1)
        return self.head((out + x).reshape(b, -1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="batch the per-group MLPs into baddbmm calls")
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=640)
    args = p.parse_args()

    torch.manual_seed(0)
    groups, k, hidden, classes = 128, 16, 32, 10
    n = args.steps * args.batch_size
    ds = InMemoryBatches(torch.randn(n, groups, k), torch.randint(0, classes, (n,)))
    loader = DataLoader(ds, sampler=BatchSampler(RandomSampler(ds), args.batch_size, drop_last=True),
                        batch_size=None, num_workers=0)
    model = GroupedMLP(groups, k, hidden, classes, batched=args.fix)
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
