"""run.evaluation -- evaluation passes over the training and test sets after every epoch hold the run.

In the style of a graph-learning or vision example's ``train()`` / ``test()`` pair: each epoch trains on
a small training set, then measures accuracy on the training set *and* a larger test set, batch by
batch from DataLoaders, under ``torch.no_grad()`` with the model in ``eval()`` mode. The training
steps are short and right; the evaluation after each epoch takes longer than the epoch's training.

Planted: both evaluation passes after every epoch.

Fix (``--fix``): evaluate every ``--every`` epochs (and after the last), the usual knob
(``check_val_every_n_epoch``, ``eval_steps``).

A step here is what the fix is judged on: one epoch (training + its share of evaluation);
``mean_iteration_ms`` is the mean over all the run's epochs (with ``--fix``, exactly every second one
evaluates when the epochs are even in number).
"""
import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

PLANTED = ["run.evaluation"]
E2E_STEPS = 6
"""Epochs in the end-to-end tests."""


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(-1) == y).sum().item()
            total += len(y)
    return correct / max(1, total)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="evaluate every --every epochs")
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="epochs")
    p.add_argument("--train", type=int, default=2048, help="training examples")
    p.add_argument("--test", type=int, default=8192, help="test examples")
    args = p.parse_args()

    torch.manual_seed(0)
    dim, classes = 256, 10
    proj = torch.randn(dim, classes)

    def data(n):
        x = torch.randn(n, dim)
        return TensorDataset(x, (x @ proj).argmax(-1))

    train, test = data(args.train), data(args.test)
    train_loader = DataLoader(train, batch_size=64, shuffle=True)
    train_eval = DataLoader(train, batch_size=64)
    test_loader = DataLoader(test, batch_size=64)
    model = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, classes))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    times, acc = [], (0.0, 0.0)
    for epoch in range(args.steps):
        t0 = time.perf_counter()
        model.train()
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if not args.fix or (epoch + 1) % args.every == 0 or epoch == args.steps - 1:
            acc = evaluate(model, train_eval), evaluate(model, test_loader)
        times.append(time.perf_counter() - t0)
    print(f"steps={len(times)} accuracy={acc[1]:.3f} mean_iteration_ms={statistics.fmean(times) * 1000:.1f}")


if __name__ == "__main__":
    main()
