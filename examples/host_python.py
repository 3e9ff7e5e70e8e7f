"""host.python -- the training loop spends its time in plain Python, not in torch ops.

Planted: a per-token tagging model whose loop tracks detailed metrics (accuracy,
confidence-calibration histogram, confusion counts, mean entropy) by pulling the
logits to Python with ``.tolist()`` every step and looping over every token and
class with ``math.exp``/``math.log`` and dict bookkeeping.  That costs roughly as
much time as the model's forward+backward, all of it interpreter time on the main
thread between framework calls.

Fix (``--fix``): the same metrics computed with a dozen vectorised torch ops under
``torch.no_grad()`` and accumulated in tensors (``bincount`` for the histograms);
nothing is converted to Python until the end of training.
"""
import argparse
import math
import statistics
import time
from collections import defaultdict

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

PLANTED = ["host.python"]

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16, and its matmuls run ~40x slower than fp32 (seen on an AVX2 EPYC).
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
BINS = 10


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
    """Slow: per-token Python loops over .tolist() data."""
    for row, label in zip(logits.float().tolist(), y.tolist(), strict=True):
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        z = sum(exps)
        probs = [e / z for e in exps]
        pred = probs.index(max(probs))
        conf = probs[pred]
        m["tokens"] += 1
        m["correct"] += int(pred == label)
        m["entropy"] -= sum(p * math.log(p) for p in probs if p > 0)
        b = min(int(conf * BINS), BINS - 1)
        m["bin_count"][b] += 1
        m["bin_conf"][b] += conf
        m["confusion"][(label, pred)] += 1


@torch.no_grad()
def tensor_metrics(logits, y, m):
    """Fast: the same metrics as a few vectorised ops, accumulated in tensors."""
    probs = logits.float().softmax(dim=-1)
    conf, pred = probs.max(dim=-1)
    c = probs.shape[-1]
    m["tokens"] += y.numel()
    m["correct"] += (pred == y).sum()
    m["entropy"] -= torch.special.xlogy(probs, probs).sum()
    b = (conf * BINS).long().clamp_(max=BINS - 1)
    m["bin_count"] += torch.bincount(b, minlength=BINS)
    m["bin_conf"] += torch.bincount(b, weights=conf, minlength=BINS)
    m["confusion"] += torch.bincount(y * c + pred, minlength=c * c).view(c, c)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="compute the metrics as vectorised torch ops")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    torch.manual_seed(0)
    seq, dim, classes = 32, 256, 100
    n = 2048  # distinct samples in RAM, drawn with replacement
    ds = TensorDataset(torch.randn(n, seq, dim), torch.randint(0, classes, (n, seq)))
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    model = Tagger(dim, 4, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    if args.fix:
        metrics = {"tokens": 0, "correct": torch.zeros((), dtype=torch.long), "entropy": torch.zeros(()),
                   "bin_count": torch.zeros(BINS, dtype=torch.long), "bin_conf": torch.zeros(BINS),
                   "confusion": torch.zeros(classes, classes, dtype=torch.long)}
    else:
        metrics = {"tokens": 0, "correct": 0, "entropy": 0.0, "bin_count": defaultdict(int),
                   "bin_conf": defaultdict(float), "confusion": defaultdict(int)}

    times = []
    t0 = time.perf_counter()
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BF16):
            logits = model(x)
            loss = loss_fn(logits.reshape(-1, classes), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        flat_logits, flat_y = logits.detach().reshape(-1, classes), y.reshape(-1)
        if args.fix:
            tensor_metrics(flat_logits, flat_y, metrics)
        else:
            python_metrics(flat_logits, flat_y, metrics)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
        if len(times) >= args.steps:
            break

    acc = float(metrics["correct"]) / metrics["tokens"]
    print(f"token accuracy {acc:.3f}, mean entropy {float(metrics['entropy']) / metrics['tokens']:.3f}",
          file=__import__("sys").stderr)
    steady = times[3:] if len(times) > 3 else times
    print(f"steps={len(times)} median_step_ms={statistics.median(steady) * 1000:.3f}")


if __name__ == "__main__":
    main()
