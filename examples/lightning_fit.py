"""input.fetch under Lightning -- `Trainer.fit` with automatic optimization waits for latency-bound data.

Planted: the ``LightningDataModule``'s training set emulates reading each sample from an object
store (``time.sleep(--latency-ms)`` per sample) and its ``train_dataloader()`` uses
``num_workers=0``, so every step idles ~batch_size x latency in the loader while the cores wait.

Fix (``--fix``): ``train_dataloader()`` returns ``DataLoader(..., num_workers=4,
persistent_workers=True)``: the workers overlap the reads with the model's compute.
``--bf16`` trains with ``precision="bf16-mixed"`` (what a compute.math finding proposes where the CPU
multiplies bf16 natively; its truth is measured beside the planted fix's).

Written as Lightning's docs write it: a ``LightningModule`` with ``training_step`` /
``configure_optimizers`` (AdamW, an LR scheduler), a ``LightningDataModule``, and
``L.Trainer(max_steps=...).fit``. The optimizer runs Lightning's closure (forward and backward
happen inside ``optimizer.step``). The module times its own ``training_step`` (forward + loss) and
``backward``, and ``optimizer_step`` less its closure (the update); the script prints
``steps=N median_step_ms=... forward_ms=... backward_ms=... update_ms=...``.
"""
import argparse
import statistics
import time
import warnings

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["input.fetch"]


class RemoteFeatures(Dataset):
    def __init__(self, n, dim, classes, latency_s):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.latency_s = latency_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.latency_s)  # emulated object-store round-trip
        return self.x[i], self.y[i]


class FeaturesDataModule(L.LightningDataModule):
    def __init__(self, batch_size, steps, latency_s, workers):
        super().__init__()
        self.batch_size, self.steps, self.latency_s, self.workers = batch_size, steps, latency_s, workers

    def setup(self, stage=None):
        self.train_set = RemoteFeatures(4096, 512, 10, self.latency_s)

    def train_dataloader(self):
        sampler = RandomSampler(self.train_set, replacement=True, num_samples=self.steps * self.batch_size)
        if self.workers:
            return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler,
                              num_workers=self.workers, persistent_workers=True)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler, num_workers=0)


class Classifier(L.LightningModule):
    def __init__(self, dim=512, hidden=1024, classes=10, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes))
        self.loss_fn = nn.CrossEntropyLoss()
        self.step_ends, self.fwd, self.bwd, self.upd = [], [], [], []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        t0 = time.perf_counter()
        x, y = batch
        loss = self.loss_fn(self(x), y)
        self.fwd.append(time.perf_counter() - t0)
        return loss

    def backward(self, loss, *args, **kwargs):
        t0 = time.perf_counter()
        loss.backward()
        self.bwd.append(time.perf_counter() - t0)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        inside = [0.0]

        def closure():
            t0 = time.perf_counter()
            try:
                return optimizer_closure()
            finally:
                inside[0] += time.perf_counter() - t0

        t0 = time.perf_counter()
        optimizer.step(closure=closure)
        self.upd.append(time.perf_counter() - t0 - inside[0])

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.step_ends.append(time.perf_counter())

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=50)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="4 persistent DataLoader workers")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--latency-ms", type=float, default=0.5)
    p.add_argument("--callback", action="store_true", help="add pinchpoint's Lightning callback")
    p.add_argument("--bf16", action="store_true", help='precision="bf16-mixed": mixed precision')
    args = p.parse_args()
    warnings.filterwarnings("ignore")  # Lightning's advice about workers and logging, on stderr

    L.seed_everything(0, verbose=False)
    model = Classifier()
    data = FeaturesDataModule(args.batch_size, args.steps, args.latency_ms / 1000, 4 if args.fix else 0)
    callbacks = []
    if args.callback:
        from pinchpoint.integrations import LightningCallback
        callbacks.append(LightningCallback())
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks, precision="bf16-mixed" if args.bf16 else None)
    trainer.fit(model, datamodule=data)

    ends = model.step_ends
    times = [b - a for a, b in zip(ends, ends[1:])]
    write_test_clocks(forward=model.fwd, backward=model.bwd, update=model.upd)
    steady = times[3:] if len(times) > 3 else times
    print(f"steps={trainer.global_step} median_step_ms={statistics.median(steady) * 1000:.3f} "
          f"forward_ms={statistics.median(model.fwd[3:]) * 1000:.3f} "
          f"backward_ms={statistics.median(model.bwd[3:]) * 1000:.3f} "
          f"update_ms={statistics.median(model.upd[3:]) * 1000:.3f}")


if __name__ == "__main__":
    main()
