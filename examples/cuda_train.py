"""GPU bottlenecks, one per ``--plant``: a small CUDA training loop and the fix for each.

  --plant sync    a control, not a bottleneck: per-layer activation norms read with ``.item()``
                  every step (the host waits for the GPU after every layer). Measured on an H200 it
                  costs only 6% (8.21 -> 7.73 ms with the fix: stack the norms on the device, read
                  them every 50 steps), because the host is the bottleneck either way. pinchpoint
                  must not blame host.sync here (docs/gpu-checks.md).
  --plant h2d     transfer.h2d: 150 MB fp32 image batches copied from pageable host memory with a
                  blocking ``.to("cuda")`` each step. Fix: pinned batches copied with
                  ``non_blocking=True`` one step ahead on a side stream.
  --plant fp32    compute.math: fp32 matmuls with TF32 off (PyTorch's default), so the Tensor Cores
                  sit unused. Fix: bf16 autocast.
  --plant launch  host.dispatch: 128 tiny per-group MLPs applied in a Python loop, ~3,000 kernels a
                  step, each a few microseconds of GPU work. Fix: two batched ``baddbmm`` calls.

Prints ``steps=N mean_step_ms=X median_host_step_ms=Y`` over the steps after warm-up: the mean from
one synchronize around the timed steps (none inside them), the median of the host's per-step times
(meaningful when the host is the bottleneck, and robust to a few slow steps). Needs a CUDA device (``--device cpu`` runs the same code slowly, for a dry
run of scripts/gpu_check.sh on a machine without one).
"""
import argparse
import statistics
import time

import torch
from torch import nn

WARMUP = 5


def mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.GELU()]
    return nn.Sequential(*layers)


class GroupedMLP(nn.Module):
    """Per-group 2-layer MLPs: a Python loop (planted) or two batched baddbmm calls (fix)."""

    def __init__(self, groups, k, hidden, batched):
        super().__init__()
        self.batched = batched
        self.w1 = nn.Parameter(torch.randn(groups, k, hidden) / k**0.5)
        self.b1 = nn.Parameter(torch.zeros(groups, hidden))
        self.w2 = nn.Parameter(torch.randn(groups, hidden, k) / hidden**0.5)
        self.b2 = nn.Parameter(torch.zeros(groups, k))

    def forward(self, x):  # (batch, groups, k)
        if self.batched:
            h = nn.functional.gelu(torch.baddbmm(self.b1.unsqueeze(1), x.transpose(0, 1), self.w1))
            return torch.baddbmm(self.b2.unsqueeze(1), h, self.w2).transpose(0, 1)
        params = (self.w1.unbind(0), self.b1.unbind(0), self.w2.unbind(0), self.b2.unbind(0))
        outs = [nn.functional.gelu(xg @ w1 + b1) @ w2 + b2
                for xg, w1, b1, w2, b2 in zip(x.unbind(1), *params, strict=True)]
        return torch.stack(outs, dim=1)


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 7, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))

    def forward(self, x):
        return self.body(x)


def run_sync(args, dev):
    model = mlp(1024, 24).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(1024, 1024, device=dev)
    stats = torch.zeros(24, device=dev)
    history = []

    def step(i):
        h, norms = x, []
        for layer in model:
            h = layer(h)
            if isinstance(layer, nn.GELU):
                norm = h.detach().norm()
                if args.fix:
                    norms.append(norm)
                else:
                    history.append(norm.item())  # a host read of a device value: waits for the GPU
        if args.fix:
            stats.add_(torch.stack(norms))
        loss = h.square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.fix and i % 50 == 49:
            history.extend(stats.tolist())
            stats.zero_()

    return step


def run_h2d(args, dev):
    model = SmallConvNet().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = [torch.randn(256, 3, 224, 224) for _ in range(4)]  # 154 MB each, pageable
    labels = torch.randint(0, 10, (256,), device=dev)
    side = torch.cuda.Stream() if (args.fix and dev.type == "cuda") else None
    if args.fix and dev.type == "cuda":
        batches = [b.pin_memory() for b in batches]
    pending = {}

    def fetch(i):
        b = batches[i % len(batches)]
        if side is None:
            return b.to(dev)
        with torch.cuda.stream(side):
            return b.to(dev, non_blocking=True)

    def step(i):
        if side is None:
            xb = fetch(i)
        else:
            xb = pending.pop(i) if i in pending else fetch(i)
            torch.cuda.current_stream().wait_stream(side)
            xb.record_stream(torch.cuda.current_stream())
            pending[i + 1] = fetch(i + 1)
        loss = nn.functional.cross_entropy(model(xb), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def run_fp32(args, dev):
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default, stated
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4096, 4096), nn.ReLU()) for _ in range(4)]).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(4096, 4096, device=dev)

    def step(i):
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.fix):
            loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def run_launch(args, dev):
    model = GroupedMLP(128, 16, 32, batched=args.fix).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 128, 16, device=dev)

    def step(i):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


PLANTS = {"sync": run_sync, "h2d": run_h2d, "fp32": run_fp32, "launch": run_launch}
TRUTH_CATEGORY = {"sync": None, "h2d": "transfer.h2d", "fp32": "compute.math", "launch": "host.dispatch"}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plant", choices=sorted(PLANTS), required=True)
    p.add_argument("--fix", action="store_true")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    step = PLANTS[args.plant](args, dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(WARMUP):
        step(i)
    sync()
    t0 = time.perf_counter()
    host = []
    for i in range(WARMUP, args.steps):
        t1 = time.perf_counter()
        step(i)
        host.append(time.perf_counter() - t1)
    sync()
    timed = max(1, args.steps - WARMUP)
    print(f"steps={args.steps} mean_step_ms={(time.perf_counter() - t0) * 1000 / timed:.3f} "
          f"median_host_step_ms={statistics.median(host) * 1000 if host else 0:.3f}")


if __name__ == "__main__":
    main()
