"""input.preprocess -- the training loop waits for data whose loading is CPU-bound.

Planted: ``AugmentedImages.__getitem__`` decodes and augments every sample on the CPU
with per-row NumPy work in Python loops (2x2 downsample 64->32 px, per-channel
contrast/brightness jitter, horizontal flip, normalisation), in the main process
(``num_workers=0``).  Each batch of 32 costs ~20 ms of pure CPU in
``DataLoader.__next__``, roughly 40-45% of the step.  The loader is *computing*, not
waiting: on a 2-core box, worker processes would compete with the model for the
same two cores, so the remedy is to make the transform cheaper.

Fix (``--fix``): the same transform, vectorised over the batch.  ``__getitem__`` only
returns the raw uint8 image plus the sample's random augmentation parameters
(drawn identically in both versions), and ``batch_transform`` (the DataLoader's
``collate_fn``) applies downsample/jitter/flip/normalise to the whole batch with a
handful of torch ops.  Outputs are numerically the same (float32 rounding aside).
"""
import argparse
import statistics
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler

PLANTED = ["input.preprocess"]

# Mixed precision where the CPU multiplies bf16 natively (AVX512-BF16, AMX), as careful programs do:
# elsewhere autocast emulates bf16, and its matmuls run ~40x slower than fp32 (seen on an AVX2 EPYC).
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
MEAN, STD = np.array([0.5, 0.5, 0.5], np.float32), np.array([0.25, 0.25, 0.25], np.float32)


def augment_one(img, bright, contrast, flip):
    """Slow per-sample path: uint8 (3,64,64) -> float32 (3,32,32), row by row."""
    x = img.astype(np.float32) / 255.0
    out = np.empty((3, 32, 32), np.float32)
    for c in range(3):
        for r in range(32):
            out[c, r] = x[c, 2 * r:2 * r + 2].reshape(2, 32, 2).mean(axis=(0, 2))
        m = out[c].mean()
        out[c] = (out[c] - m) * contrast + m + bright
        if flip:
            out[c] = out[c, :, ::-1]
        out[c] = np.clip(out[c], 0.0, 1.0)
        out[c] = (out[c] - MEAN[c]) / STD[c]
    return torch.from_numpy(out)


def batch_transform(samples):
    """Fast path (collate_fn): the same transform on the whole batch at once."""
    raw = torch.stack([s[0] for s in samples]).float() / 255.0
    bright, contrast, flip, y = (torch.tensor([s[i] for s in samples]) for i in (1, 2, 3, 4))
    x = raw.view(len(samples), 3, 32, 2, 32, 2).mean(dim=(3, 5))
    m = x.mean(dim=(2, 3), keepdim=True)
    x = (x - m) * contrast.view(-1, 1, 1, 1) + m + bright.view(-1, 1, 1, 1)
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x).clamp(0.0, 1.0)
    x = (x - torch.from_numpy(MEAN).view(1, 3, 1, 1)) / torch.from_numpy(STD).view(1, 3, 1, 1)
    return x, y


class AugmentedImages(Dataset):
    def __init__(self, n, classes, vectorised):
        rng = np.random.default_rng(0)
        self.raw = rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8)  # "decoded" images
        self.labels = rng.integers(0, classes, n)
        self.params = rng.uniform([-0.1, 0.8, 0.0], [0.1, 1.2, 1.0], (n, 3)).astype(np.float32)
        self.vectorised = vectorised

    def __len__(self):
        return len(self.raw)

    def __getitem__(self, i):
        bright, contrast, flip = float(self.params[i, 0]), float(self.params[i, 1]), bool(self.params[i, 2] > 0.5)
        if self.vectorised:
            return torch.from_numpy(self.raw[i]), bright, contrast, flip, int(self.labels[i])
        return augment_one(self.raw[i], bright, contrast, flip), int(self.labels[i])


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))


class PatchMLP(nn.Module):
    """4x4 patches -> per-patch MLP blocks -> mean-pool -> classifier."""

    def __init__(self, d, n_blocks, classes):
        super().__init__()
        self.embed = nn.Linear(48, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n_blocks)])
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b = x.shape[0]
        patches = x.view(b, 3, 8, 4, 8, 4).permute(0, 2, 4, 1, 3, 5).reshape(b, 64, 48)
        return self.head(self.blocks(self.embed(patches)).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="vectorise the augmentation over the batch")
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (the plant uses 0)")
    args = p.parse_args()

    torch.manual_seed(0)
    ds = AugmentedImages(2048, 10, vectorised=args.fix)
    sampler = RandomSampler(ds, replacement=True, num_samples=args.steps * args.batch_size)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        collate_fn=batch_transform if args.fix else None)
    model = PatchMLP(128, 4, 10)
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
