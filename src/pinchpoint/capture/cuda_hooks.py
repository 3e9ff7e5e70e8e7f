"""CUDA phases: host-to-device copies (`h2d_copy`) and host waits on the device (`sync_wait`).

Installed only when CUDA is available, so a CPU run pays nothing for them. Wrapped:
  `torch.cuda.synchronize`, `Stream.synchronize`, `Event.synchronize`            -> sync_wait
  `Tensor.item`, `Tensor.tolist`, `Tensor.cpu` on a CUDA tensor (implicit syncs) -> sync_wait
  `Tensor.to` / `Tensor.cuda` of a CPU tensor to a CUDA device                  -> h2d_copy
A non_blocking copy from pinned memory returns at once, so its interval is short: the exposed cost
of a pageable or blocking copy is what shows. Not yet exercised on a GPU in CI (no GPU there).
"""

from __future__ import annotations

import time
from typing import Any

_now = time.monotonic_ns


def install(agent: Any, torch: Any) -> bool:
    from pinchpoint.capture.hooks import timed

    try:
        if not torch.cuda.is_available():
            return False
    except Exception:
        return False

    def on_cuda(t: Any, *args: Any, **kwargs: Any) -> bool:
        return bool(getattr(t, "is_cuda", False))

    def cpu_to_cuda(t: Any, *args: Any, **kwargs: Any) -> bool:
        if getattr(t, "is_cuda", True):
            return False
        target = kwargs.get("device", args[0] if args else None)
        return "cuda" in str(target)

    from pinchpoint.capture.patches import PATCHES

    for owner in (torch.cuda, torch.cuda.Stream, torch.cuda.Event):
        PATCHES.set(owner, "synchronize", timed(agent, "sync_wait", owner.synchronize))
    tensor = torch.Tensor
    for name in ("item", "tolist", "cpu"):
        PATCHES.set(tensor, name, timed(agent, "sync_wait", getattr(tensor, name), on_cuda))
    PATCHES.set(tensor, "to", timed(agent, "h2d_copy", tensor.to, cpu_to_cuda))
    to_cuda = timed(agent, "h2d_copy", tensor.cuda, lambda t, *a, **k: not getattr(t, "is_cuda", True))
    PATCHES.set(tensor, "cuda", to_cuda)
    return True
