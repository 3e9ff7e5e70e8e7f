"""compile.recompiles -- a compiled model that branches on a tensor's value in Python: dynamo breaks the
graph at the `.item()`, guards the code after the break on the value read, and compiles it again for
every new value until the recompile limit; from then on that code runs eagerly.

Run with ``python examples/compile_value_guard.py``. A small token model (embedding, two MLP blocks,
mean-pooled classifier) trains on batches of one shape. Its forward damps large activations with
``if h.abs().mean().item() > LIMIT: h = h * 0.5`` (planted: a data-dependent branch written in Python,
as a clipping, a NaN check or a curriculum switch often is).

Planted: the break resumes in a new frame whose guard is the value read (``___stack0 == 0.83…``,
``TORCH_LOGS=recompiles``). The value changes every step, so the resumed frame recompiles every step,
forward and backward, until ``torch._dynamo.config.recompile_limit`` (8); after that it runs eagerly,
with one warning in the log. The sizes never change: dynamic shapes do not help.

Fix (``--fix``): the branch kept on the tensor, ``h = torch.where(h.abs().mean() > LIMIT, h * 0.5, h)``:
one graph, compiled once.

Every run compiles cold (inductor's on-disk caches off, as in a fresh container), so that the truth does
not depend on which runs came before. The cost falls on the first steps, so the run's loop is what the fix
changes: it prints ``run_ms`` (the loop, first step included) beside the median step.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

PLANTED = ["compile.recompiles"]
E2E = False
"""Not run by the end-to-end tests: its nine cold compilations take ~100 s on a 2-core CPU, more than
the suite can spend on one program. Its truth is measured (`measure_truth.py`); the records of a real
run of it are tested (`tests/data/compile/value_guard.json`, `tests/test_compiles.py`)."""
LIMIT = 0.5


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class TokenModel(nn.Module):
    def __init__(self, *, fixed, vocab=1000, d=128, classes=4):
        super().__init__()
        self.fixed = fixed
        self.embed = nn.Embedding(vocab, d)
        self.first, self.second = Block(d), Block(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.first(self.embed(tokens))
        if self.fixed:
            h = torch.where(h.abs().mean() > LIMIT, h * 0.5, h)
        elif h.abs().mean().item() > LIMIT:  # planted: the value read into Python
            h = h * 0.5
        return self.head(self.second(h).mean(dim=1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep the branch on the tensor (torch.where)")
    p.add_argument("--steps", type=int, default=24)
    args = p.parse_args()

    torch.manual_seed(0)
    model = TokenModel(fixed=args.fix)
    compiled = torch.compile(model, dynamic=False)  # static shapes, on purpose (kernels specialised)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    batches = [
        (torch.randint(0, 1000, (16, 64), generator=g), torch.randint(0, 4, (16,), generator=g))
        for _ in range(8)
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
