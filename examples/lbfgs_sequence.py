"""host.dispatch -- an LBFGS fit whose model unrolls an LSTM cell by cell in Python.

In the style of PyTorch's time-sequence-prediction example: a batch of sine waves, a model of two
stacked ``nn.LSTMCell`` and a linear head stepped over the sequence one time step at a time, trained
full-batch with ``torch.optim.LBFGS`` and ``optimizer.step(closure)``. Every optimizer step evaluates
the closure up to ``max_iter`` times (forward and backward each time).

Planted: the Python loop over time steps. Each time step issues a handful of framework ops on
97x51 tensors, tiny for their fixed cost (module call, dispatcher, autograd node), so the closure's
forward and backward are mostly per-op overhead.

Fix (``--fix``): the same two-layer LSTM as one ``nn.LSTM(num_layers=2)`` call over the whole
sequence and the head applied to all outputs at once: the same math in a few large ops.

The final line carries the program's own clocks: ``steps`` (optimizer steps), ``closures`` (closure
evaluations), ``forward_ms``/``backward_ms`` (median per step, summed over its closures) and
``update_ms`` (median time in ``step()`` outside the closures).
"""
import argparse
import math
import statistics
import time

import torch
from torch import nn
from _test_clocks import write_test_clocks  # the test suite's per-step clocks

PLANTED = ["host.dispatch"]


class Cells(nn.Module):
    """Two LSTM cells and a head, stepped in Python (the planted form)."""

    def __init__(self, hidden):
        super().__init__()
        self.hidden = hidden
        self.lstm1, self.lstm2 = nn.LSTMCell(1, hidden), nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x):
        b = x.size(0)
        h1, c1, h2, c2 = (x.new_zeros(b, self.hidden) for _ in range(4))
        outputs = []
        for t in range(x.size(1)):
            h1, c1 = self.lstm1(x[:, t : t + 1], (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


class Layers(nn.Module):
    """The same model as one two-layer LSTM over the sequence (the fix)."""

    def __init__(self, hidden):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, num_layers=2, batch_first=True)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x.unsqueeze(-1))
        return self.linear(out).squeeze(-1)


def sine_waves(n, length, period=20.0):
    """`n` sine waves, each shifted by a random phase (the upstream example's data, made in memory)."""
    g = torch.Generator().manual_seed(2)
    shift = torch.randint(-4 * int(period), 4 * int(period), (n, 1), generator=g)
    t = torch.arange(length + 1).unsqueeze(0) + shift
    return torch.sin(t.float() / period * 2 * math.pi / 2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fix", action="store_true", help="one nn.LSTM call instead of a Python loop over cells")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--length", type=int, default=50)
    p.add_argument("--max-iter", type=int, default=4)
    p.add_argument("--bf16", action="store_true", help="the forward under bf16 autocast (a truth for compute.math)")
    args = p.parse_args()

    torch.manual_seed(0)
    data = sine_waves(97, args.length)
    x, y = data[:, :-1], data[:, 1:]
    model = (Layers if args.fix else Cells)(51)
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=args.max_iter)

    clocks = {"forward": 0.0, "backward": 0.0, "closure": 0.0}
    closures = 0

    def closure():
        nonlocal closures
        c0 = time.perf_counter()
        optimizer.zero_grad()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = criterion(model(x).float(), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        clocks["forward"] += t1 - t0
        clocks["backward"] += t2 - t1
        clocks["closure"] += t2 - c0
        closures += 1
        return loss

    times, fwd, bwd, upd = [], [], [], []
    for _ in range(args.steps):
        for k in clocks:
            clocks[k] = 0.0
        t0 = time.perf_counter()
        loss = optimizer.step(closure)
        dt = time.perf_counter() - t0
        times.append(dt)
        fwd.append(clocks["forward"])
        bwd.append(clocks["backward"])
        upd.append(dt - clocks["closure"])
    print(f"final loss {loss.item():.5f}", file=__import__("sys").stderr)

    write_test_clocks(forward=fwd, backward=bwd, update=upd)

    def med(v):
        steady = v[3:] if len(v) > 3 else v
        return statistics.median(steady) * 1000

    print(
        f"steps={len(times)} closures={closures} median_step_ms={med(times):.3f} "
        f"forward_ms={med(fwd):.3f} backward_ms={med(bwd):.3f} update_ms={med(upd):.3f}"
    )


if __name__ == "__main__":
    main()
