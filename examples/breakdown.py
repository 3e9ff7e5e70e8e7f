"""Dev helper: run an example and print where its wall time goes (to stderr).

    python examples/breakdown.py examples/input_fetch.py [--fix ...]

Wraps DataLoader.__next__, top-level nn.Module.__call__, torch.autograd.backward,
Optimizer.step (global hooks) and torch.save with timers -- roughly the hooks pinchpoint uses --
and reports each as a share of the wall time between the first and last hooked event.
"""
import runpy
import sys
import time
from collections import defaultdict

import torch
from torch import nn
from torch.optim import optimizer as _optim_mod
from torch.utils.data import dataloader

acc = defaultdict(float)
count = defaultdict(int)
depth = [0]
span = [None, None]


def timed(name, fn):
    def wrapper(*a, **k):
        if depth[0]:
            return fn(*a, **k)
        depth[0] += 1
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            e = time.perf_counter()
            depth[0] -= 1
            acc[name] += e - t
            count[name] += 1
            span[0] = t if span[0] is None else span[0]
            span[1] = e
    return wrapper


dataloader._BaseDataLoaderIter.__next__ = timed("data", dataloader._BaseDataLoaderIter.__next__)
nn.Module.__call__ = timed("forward", nn.Module.__call__)
torch.autograd.backward = timed("backward", torch.autograd.backward)
torch.save = timed("save", torch.save)
_opt_t = {}
_optim_mod.register_optimizer_step_pre_hook(lambda o, a, k: _opt_t.__setitem__("t", time.perf_counter()))


def _post(o, a, k):
    e = time.perf_counter()
    acc["optimizer"] += e - _opt_t["t"]
    count["optimizer"] += 1
    span[1] = e


_optim_mod.register_optimizer_step_post_hook(_post)

script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    total = (span[1] - span[0]) if span[0] is not None else float("nan")
    parts = " ".join(f"{k}={v / total * 100:.1f}%(n={count[k]})" for k, v in sorted(acc.items()))
    other = 1 - sum(acc.values()) / total
    print(f"[breakdown] {script} {' '.join(sys.argv[1:])}: wall={total:.2f}s {parts} other={other * 100:.1f}%",
          file=sys.stderr)
