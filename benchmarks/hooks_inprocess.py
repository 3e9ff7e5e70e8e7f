"""In-process cost of pinchpoint's hooks, without the noise between processes.

    .venv/bin/python benchmarks/hooks_inprocess.py [--blocks 80] [--part all|module|backward|optim|loader]

One process trains `examples/healthy.py`'s model; `pinchpoint.profile()` attaches the agent (op window
off, one system sample a minute), then blocks of 10 steps alternate (ABBA) between the agent's hooks
installed and the originals restored. Prints the mean step with and without, and the paired median
ratio. `--part` toggles one hook alone (the others stay on): top-level module calls, backward, or the
optimizer hooks (which also end each step: counters, the steps.jsonl line), or the DataLoader's
(`__next__` and the dataset fetch, which records each batch's wall, CPU and run-queue time); the batches
come from a DataLoader as in `healthy.py`. `--part sampler` pauses
and resumes the system sampler process instead (SIGSTOP/SIGCONT), at the default interval. This
measures the agent's and the sampler's own cost; `overhead.py` measures everything between processes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=80, help="blocks of 10 steps (half with hooks)")
    ap.add_argument(
        "--part", choices=["all", "module", "backward", "optim", "loader", "sampler", "stacks"], default="all"
    )
    ap.add_argument("--interval", type=float, default=0.1, help="sampling interval for --part sampler")
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second for --part stacks")
    args = ap.parse_args()

    import healthy  # examples/healthy.py: the model and the tuned allocator
    import torch
    import torch.autograd as autograd
    from torch import nn
    from torch.optim import optimizer as optim_mod
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler
    from torch.utils.data import dataloader as dl_mod
    from torch.utils.data._utils import fetch as fetch_mod

    import pinchpoint

    healthy.keep_freed_memory()
    torch.manual_seed(0)
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    seq, dim, classes, bs = 64, 256, 100, 32
    model = healthy.SeqClassifier(dim, 2, classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    ds = healthy.InMemoryBatches(torch.randn(2048, seq, dim), torch.randint(0, classes, (2048,)))
    sampler = RandomSampler(ds, replacement=True, num_samples=10**9)
    loader = iter(DataLoader(ds, sampler=BatchSampler(sampler, bs, drop_last=True), batch_size=None))

    def step() -> None:
        x, y = next(loader)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def block(n: int = 10) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    orig_call, orig_backward = nn.Module.__call__, autograd.backward
    orig_next, orig_fetch = dl_mod._BaseDataLoaderIter.__next__, fetch_mod._MapDatasetFetcher.fetch
    for _ in range(3):
        block()
    interval = args.interval if args.part == "sampler" else 60.0
    prof = pinchpoint.profile(
        out=Path(tempfile.mkdtemp()) / "run", opwindow="off", sample_interval_s=interval, print_report=False
    )
    prof.__enter__()
    hooked_call, hooked_backward = nn.Module.__call__, autograd.backward
    hooked_next, hooked_fetch = dl_mod._BaseDataLoaderIter.__next__, fetch_mod._MapDatasetFetcher.fetch
    pre = dict(optim_mod._global_optimizer_pre_hooks)
    post = dict(optim_mod._global_optimizer_post_hooks)

    import signal

    spy = None
    if args.part == "stacks":  # py-spy on this process, as `pinchpoint run --stacks` starts it
        from pinchpoint.capture.stacks import spawn_stack_sampler

        assert prof.run_dir is not None
        spy = spawn_stack_sampler(prof.run_dir, os.getpid(), rate_hz=args.rate)
        assert spy is not None
        time.sleep(1.0)

    def hooks(on: bool) -> None:
        if spy is not None:
            spy.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            return
        if args.part == "sampler":  # the system sampler (default interval) paused or running
            os.kill(prof._sampler.pid, signal.SIGCONT if on else signal.SIGSTOP)
            return
        if args.part in ("all", "module"):
            nn.Module.__call__ = hooked_call if on else orig_call  # type: ignore[method-assign]
        if args.part in ("all", "backward"):
            autograd.backward = hooked_backward if on else orig_backward
        if args.part in ("all", "loader"):
            dl_mod._BaseDataLoaderIter.__next__ = hooked_next if on else orig_next  # type: ignore[method-assign]
            fetch_mod._MapDatasetFetcher.fetch = hooked_fetch if on else orig_fetch  # type: ignore[method-assign]
        if args.part in ("all", "optim"):
            optim_mod._global_optimizer_pre_hooks.clear()
            optim_mod._global_optimizer_post_hooks.clear()
            if on:
                optim_mod._global_optimizer_pre_hooks.update(pre)
                optim_mod._global_optimizer_post_hooks.update(post)

    with_hooks, without = [], []
    for i in range(args.blocks):
        on = i % 4 in (0, 3)
        hooks(on)
        (with_hooks if on else without).append(block())
    hooks(True)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=30)
    prof.__exit__(None, None, None)
    ratio = statistics.median(a / b for a, b in zip(with_hooks, without, strict=False))
    print(
        f"{args.part}: with hooks {statistics.fmean(with_hooks):.2f} ms, without {statistics.fmean(without):.2f} ms, "
        f"ratio of means {statistics.fmean(with_hooks) / statistics.fmean(without):.4f}, paired median {ratio:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
