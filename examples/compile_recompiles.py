"""compile.recompiles -- a compiled model fed sequences of varying length with dynamic=False: every new
length compiles the graph again, until the recompile limit, then the model runs eagerly.

Run with ``python examples/compile_recompiles.py``. A small token model (embedding, an MLP block over
the sequence, mean-pooled classifier) trains on batches of 16 sequences whose length changes from batch
to batch (6 lengths, 32 to 112 tokens: text without bucketing). It is compiled with
``torch.compile(model, dynamic=False)`` (planted: static shapes, "to keep the kernels specialised").

Planted: each new length fails dynamo's size guard and recompiles forward and backward (seconds each on
a CPU): 5 recompiles, under ``torch._dynamo.config.recompile_limit`` (8; past it the frame would run
eagerly on lengths it has not seen).

Fix (``--fix``): ``torch.compile(model)`` (``dynamic=None``, the default): the second length compiles one
graph dynamic in the sequence dimension, and no length compiles again.

Every run compiles cold (inductor's on-disk caches off, as in a fresh container or on a new node's first
run): with the caches warm the same recompiles took a tenth of the time, and the truth would depend on
which runs came before. The cost falls on a few steps, so the run's loop is what the fix changes: it prints ``run_ms`` (the
loop, first step included) beside the median step.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

PLANTED = ["compile.recompiles"]
E2E_STEPS = 24
"""Steps the end-to-end tests run (each length seen four times)."""
LENGTHS = (32, 48, 64, 80, 96, 112)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TokenModel(nn.Module):
    def __init__(self, vocab=1000, d=128, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = Block(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        return self.head(self.blocks(self.embed(tokens)).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="compile with dynamic=None (the default)")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()

    torch.manual_seed(0)
    model = TokenModel()
    compiled = torch.compile(model) if args.fix else torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, 1000, (16, n), generator=g), torch.randint(0, 4, (16,), generator=g)) for n in LENGTHS
    ]

    times = []
    start = t0 = time.perf_counter()
    for step in range(args.steps):
        tokens, labels = batches[step % len(batches)]
        loss = nn.functional.cross_entropy(compiled(tokens), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    run_ms = (time.perf_counter() - start) * 1000
    print(f"steps={len(times)} median_step_ms={statistics.median(times) * 1000:.3f} run_ms={run_ms:.1f}")


if __name__ == "__main__":
    main()
