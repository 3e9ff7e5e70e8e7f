"""Decides, in each Python process of a profiled program, whether and how the agent starts."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Processes that launch or serve the program rather than run its steps.
LAUNCHER_MARKERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
SPAWNED_WORKER_MARKERS = ("multiprocessing.spawn", "multiprocessing.forkserver", "--multiprocessing-fork")


def _cmdline() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(sys.argv)


def start_from_environment(run_dir: str) -> None:
    argv = _cmdline()
    joined = " ".join(argv)
    if any(os.path.basename(a) == "torchrun" for a in argv[:2]) or any(
        m in joined for m in LAUNCHER_MARKERS[1:]
    ):
        return  # torchrun's elastic agent: its children (the ranks) start their own agents
    from pinchpoint.capture import agent, pysampler, stacks
    from pinchpoint.capture.roles import Role

    if os.environ.get(stacks.STACKS_ENV):
        stacks.allow_ptrace_from_any()
    a = agent.start(Path(run_dir))
    if any(m in joined for m in SPAWNED_WORKER_MARKERS):
        a.role = Role.WORKER
        a.window.disable()
    elif not os.environ.get(stacks.STACKS_ENV):
        pysampler.start(Path(run_dir))  # (py-spy, when asked for, samples the whole tree instead)
    if a.role is Role.MAIN:
        from pinchpoint.capture import on_term

        sampler = pysampler.SAMPLER
        # (the sampler first: stopped before the agent's flush, it does not sample pinchpoint flushing)
        on_term.flush_on_term(*((sampler.write,) if sampler is not None else ()), a.close)
