"""Writes two real torch.profiler traces (CPU) of a compiled model that breaks its graph, steps marked
by `prof.step()`: recompiles.json.gz (a break on `.item()`, whose resumed code dynamo guards on the value
read, and a new batch size often with `dynamic=False`: compiled while recorded, until the resumed frame
hits the recompile limit) and graph_break.json.gz (a break that guards on nothing, one size, compiled
before the profiler records).

Run once with the project's torch (2.13, CPU): `python make_trace.py`. Not run by the tests.
"""

import gzip
import json
import os
import tempfile

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule


class Net(nn.Module):
    def __init__(self, *, item: bool) -> None:
        super().__init__()
        self.item = item
        self.a = nn.Linear(64, 64)
        self.b = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        if self.item:
            if y.sum().item() > 0:  # the graph breaks here; the code after it is guarded on the value
                y = y * 2
        else:
            torch._dynamo.graph_break()  # as a print or an unsupported call would
            y = y * 2
        return self.b(y).sum()


def record(out: str, sizes: list[int], *, item: bool, dynamic: bool | None, skip: int) -> None:
    """Profiles one step per size after `skip` unrecorded steps (compiled then, when the sizes repeat)."""
    torch.manual_seed(0)
    net = Net(item=item)
    step = torch.compile(net, dynamic=dynamic)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    path = os.path.join(tempfile.mkdtemp(), "t.json")
    plan = schedule(wait=skip, warmup=1, active=len(sizes), repeat=1)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=lambda p: p.export_chrome_trace(path)
    ) as prof:
        for n in [sizes[0]] * (skip + 1) + sizes:  # the profiler's warm-up step is not recorded
            loss = step(torch.randn(n, 64))
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    with open(path) as f:
        doc = json.load(f)
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)


def main() -> None:
    # a new size (and the value the break reads) every step: recompiles until frame 1 gives up
    record("recompiles.json.gz", [8, 8, 12, 12, 16, 16, 20, 8, 12, 16, 20, 8], item=True, dynamic=False, skip=0)
    # one size, compiled before the profiler records: a graph break that guards on nothing, every step
    record("graph_break.json.gz", [16] * 8, item=False, dynamic=None, skip=3)


if __name__ == "__main__":
    main()
