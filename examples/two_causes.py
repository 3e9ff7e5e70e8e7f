"""two causes -- latency-bound data fetch AND per-token Python metrics in the same loop.

Planted (1, input.fetch): ``RemoteShardDataset.__getitem__`` sleeps ``--latency-ms``
(default 0.6 ms) per sample to emulate object-store / network reads, with
``num_workers=0``; the step waits ~20 ms in ``DataLoader.__next__`` while the CPU idles.
Planted (2, host.python): after each step the loop pulls the logits to Python with
``.tolist()`` and computes accuracy / confidence / entropy per token in Python loops
(~20 ms of interpreter time on the main thread).

Fixes (``--fix {none,input,python,all}``; default ``none``; a bare ``--fix`` means ``all``):
  input  -- ``num_workers=4, persistent_workers=True`` (workers overlap the latency);
  python -- the same metrics as a few vectorised torch ops accumulated in tensors;
  all    -- both.
"""
import argparse
import math
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

PLANTED = ["input.fetch", "host.python"]

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16, and its matmuls run ~40x slower than fp32 (seen on an AVX2 EPYC).
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


class RemoteShardDataset(Dataset):
    def __init__(self, n, seq, dim, classes, latency_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, seq, dim, generator=g)
        self.y = torch.randint(0, classes, (n, seq), generator=g)
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


class Tagger(nn.Module):
    def __init__(self, d, n_blocks, classes):
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x))


def python_metrics(logits, y, m):
    for row, label in zip(logits.float().tolist(), y.tolist(), strict=True):
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        z = sum(exps)
        probs = [e / z for e in exps]
        pred = probs.index(max(probs))
        m["tokens"] += 1
        m["correct"] += int(pred == label)
        m["confidence"] += probs[pred]
        m["entropy"] -= sum(p * math.log(p) for p in probs if p > 0)


@torch.no_grad()
def tensor_metrics(logits, y, m):
    probs = logits.float().softmax(dim=-1)
    conf, pred = probs.max(dim=-1)
    m["tokens"] += y.numel()
    m["correct"] += (pred == y).sum()
    m["confidence"] += conf.sum()
    m["entropy"] -= torch.special.xlogy(probs, probs).sum()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", nargs="?", const="all", default="none", choices=("none", "input", "python", "all"),
                   help="which cause to remove (bare --fix means all)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--latency-ms", type=float, default=0.6)
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers of the input fix")
    args = p.parse_args()
    fix_input, fix_python = args.fix in ("input", "all"), args.fix in ("python", "all")

    torch.manual_seed(0)
    seq, dim, classes = 32, 256, 72
    ds = RemoteShardDataset(2048, seq, dim, classes, args.latency_ms / 1000)
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    workers = dict(num_workers=args.workers, persistent_workers=True) if fix_input else dict(num_workers=0)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, **workers)
    model = Tagger(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    zero = torch.zeros(())
    metrics = {"tokens": 0, "correct": zero.clone(), "confidence": zero.clone(), "entropy": zero.clone()} \
        if fix_python else {"tokens": 0, "correct": 0, "confidence": 0.0, "entropy": 0.0}

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, classes), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        (tensor_metrics if fix_python else python_metrics)(logits.detach().reshape(-1, classes),
                                                           y.reshape(-1), metrics)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        if len(times) >= args.steps:
            break

    print(f"token accuracy {float(metrics['correct']) / metrics['tokens']:.3f}", file=sys.stderr)
    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
