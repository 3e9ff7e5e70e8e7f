"""compile.graph_breaks -- a compiled model whose forward reads a tensor back into Python (``.item()``) in
every block: each read breaks the graph, so one compiled forward becomes many small graphs with Python
between them.

Run with ``python examples/compile_graph_break.py``. A small residual MLP (8 blocks, width 256) trains on
batches of 64 rows, compiled with ``torch.compile(model)``. Each block checks its output for overflow the
way people write it in eager code: ``scale = h.abs().amax().item()`` read into Python, then
``h / (1 + scale / LIMIT)``.

Planted: ``Tensor.item()`` is a graph break (dynamo cannot trace a Python float out of a tensor unless
``torch._dynamo.config.capture_scalar_outputs`` is set): a break in every block, each block two graphs
forward and two backward, each entered through its guards, the eager ``.item()`` between them and no
fusion across a block's end.

Fix (``--fix``): keep the scale on the tensor, ``scale = h.abs().amax()``: one graph forward, one
backward. (``TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1`` lets dynamo trace the ``.item()`` instead, no code
changed.)

Every run compiles cold (inductor's on-disk caches off, as in a fresh container), and the compilation
(~20 s on a CPU) dwarfs 120 small steps either way: the truth is the steady step, which is what a longer
run pays. The script prints the median step after the first ten (``median_step_ms``) and the loop.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

PLANTED = ["compile.graph_breaks"]
E2E_STEPS = 40
"""Steps the end-to-end tests run."""
LIMIT = 1e4


class Block(nn.Module):
    def __init__(self, d, fix):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.fix = fix

    def forward(self, x):
        h = x + self.down(nn.functional.gelu(self.up(self.norm(x))))
        if self.fix:
            scale = h.abs().amax()
        else:
            scale = h.abs().amax().item()  # planted: a Python float read from the tensor, every block
        return h / (1.0 + scale / LIMIT)


class Net(nn.Module):
    def __init__(self, fix, d=64, depth=8):
        super().__init__()
        self.blocks = nn.Sequential(*(Block(d, fix) for _ in range(depth)))
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.blocks(x))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="keep the scale on the tensor (no .item())")
    p.add_argument("--steps", type=int, default=120)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Net(args.fix)
    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)) for _ in range(8)]

    times = []
    start = t0 = time.perf_counter()
    for step in range(args.steps):
        x, y = batches[step % len(batches)]
        loss = nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        t0 = t1
    loop_s = time.perf_counter() - start
    print(f"steps={len(times)} median_step_ms={statistics.median(times[10:]) * 1000:.3f} loop_s={loop_s:.1f}")


if __name__ == "__main__":
    main()
