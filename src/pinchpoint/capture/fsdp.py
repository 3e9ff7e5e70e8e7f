"""FSDP2's settings, read from the sharded modules once they have trained a step.

`fully_shard` is called in the program's code, usually under a name imported before any hook could
wrap it, so its arguments are read back from the modules instead: each `FSDPModule`'s parameter group
says whether it reshards after forward, over which mesh, and in which dtypes. These are FSDP2's
internals (torch 2.13); a torch that moves them gives no line, never an error.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable
from typing import Any


def fsdp_modules(roots: Iterable[Any]) -> list[Any]:
    """The FSDP2-sharded modules under `roots` (none without FSDP2)."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    cls = getattr(fsdp, "FSDPModule", None)
    if cls is None:
        return []
    found: dict[int, Any] = {}
    for root in roots:
        with contextlib.suppress(Exception):
            found.update((id(m), m) for m in root.modules() if isinstance(m, cls))
    return list(found.values())


def fsdp_settings(modules: Iterable[Any]) -> dict[str, Any] | None:
    """distributed.jsonl's `fsdp` line for these sharded modules; None without any."""
    found = list(modules)
    groups = []
    for module in found:
        with contextlib.suppress(Exception):
            group = module._get_fsdp_state()._fsdp_param_group
            if group is not None:
                groups.append(group)
    if not groups:
        return None
    mesh = getattr(groups[0].mesh_info, "mesh", None)
    mp = groups[0].mp_policy
    return {
        "t_ns": time.monotonic_ns(),
        "kind": "fsdp",
        "modules": len(groups),
        "resharding": sum(1 for g in groups if g.post_forward_mesh_info is not None),
        "mesh": [int(x) for x in getattr(mesh, "shape", ())],
        "mesh_dims": list(getattr(mesh, "mesh_dim_names", None) or []),
        "param_dtype": _dtype(getattr(mp, "param_dtype", None)),
        "reduce_dtype": _dtype(getattr(mp, "reduce_dtype", None)),
        "param_bytes": _unsharded_bytes(found),
    }


def _dtype(dtype: Any) -> str | None:
    return str(dtype).removeprefix("torch.") if dtype is not None else None


def _unsharded_bytes(modules: Iterable[Any]) -> int:
    """The sharded modules' parameters at their full size (a DTensor's `numel` is the global one)."""
    seen: dict[int, int] = {}
    for module in modules:
        with contextlib.suppress(Exception):
            seen.update((id(p), p.numel() * p.element_size()) for p in module.parameters())
    return sum(seen.values())
