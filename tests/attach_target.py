"""A program for `pinchpoint attach` tests: runs an example's loop (examples/NAME.py ARGS...) as a user
would, and on SIGUSR1 says whether torch is exactly as it was before anything attached, then exits.

    python tests/attach_target.py EXAMPLE.py [ARGS...]

"Exactly as it was": every attribute of the objects pinchpoint's agent patches is the same object as
at start-up (names torch added later, lazily imported submodules, are left aside), and torch's global
optimizer hooks are the ones it had. torch._dynamo is imported first, as any program that compiles
has: the agent's op window imports it, and importing it makes torch rewrap torch.manual_seed itself
(torch/_dynamo/__init__.py), a change of torch's own, not the agent's."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import types
from typing import Any

import torch
import torch._dynamo
import torch.distributed
import torch.multiprocessing
import torch.optim.optimizer as opt_mod
import torch.utils.data._utils.fetch as fetch_mod
import torch.utils.data.dataloader as dl_mod


def _owners() -> list[Any]:
    owners: list[Any] = [
        torch,
        torch.autograd,
        torch.nn.Module,
        torch.Tensor,
        dl_mod._BaseDataLoaderIter,
        fetch_mod._MapDatasetFetcher,
        fetch_mod._IterableDatasetFetcher,
        torch.multiprocessing,
    ]
    if torch.distributed.is_available():
        from torch.nn.parallel import DistributedDataParallel

        owners += [torch.distributed, DistributedDataParallel]
    return owners


TORCH_STATE = {"_active_ddp_module"}
"""Class attributes torch itself sets and resets around each call (DDP's forward marks itself active):
a signal that lands mid-forward sees them set."""
BEFORE = [(o, dict(vars(o))) for o in _owners()]
PATH = list(sys.path)
HOOKS = (dict(opt_mod._global_optimizer_pre_hooks), dict(opt_mod._global_optimizer_post_hooks))


def _changes() -> list[str]:
    changed = []
    for owner, before in BEFORE:
        now = vars(owner)
        name = getattr(owner, "__name__", repr(owner))
        for key, value in before.items():
            if key not in TORCH_STATE and now.get(key, None) is not value:
                changed.append(f"{name}.{key}")
        for key in now.keys() - before.keys():
            if not isinstance(now[key], types.ModuleType):
                changed.append(f"{name}.{key} (added)")
    if (dict(opt_mod._global_optimizer_pre_hooks), dict(opt_mod._global_optimizer_post_hooks)) != HOOKS:
        changed.append("optimizer global hooks")
    added = [p for p in sys.path if p not in PATH]
    if added:
        changed.append(f"sys.path (+{added})")
    return changed


def _say(line: str) -> None:
    """One write per line: torchrun's ranks share one pipe, unbuffered, and a print's text and its
    newline went out as two writes, so two ranks' lines came out run together. (No flush of
    sys.stdout: from the signal handler that could re-enter a write the program was making.)"""
    os.write(1, (line + "\n").encode())


def _report(signum: int, frame: Any) -> None:
    changes = _changes()
    ours = sum(1 for m in sys.modules if m.startswith("pinchpoint"))
    _say(f"attach-target: unchanged={not changes} pinchpoint_modules={ours} {' '.join(changes)}")
    os._exit(0)


signal.signal(signal.SIGUSR1, _report)
_say(f"attach-target: ready pid={os.getpid()}")
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
_say("attach-target: the example ended before the test asked")
