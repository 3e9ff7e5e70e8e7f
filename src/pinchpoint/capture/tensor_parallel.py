"""Tensor parallelism's settings, read from the trained modules' parameters once they have trained a step.

`parallelize_module` is called under a name the program imported before any hook could wrap it; what
it did is in the parameters it left: DTensors placed `Shard(0)` (a column-wise linear's weight),
`Shard(1)` (row-wise) or `Replicate()` over the tensor-parallel mesh. Read only where no module is
FSDP2-sharded (FSDP2's parameters are DTensors too; a 2-D mesh is not read yet).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any


def tp_settings(roots: Iterable[Any]) -> dict[str, Any] | None:
    """distributed.jsonl's `tensor_parallel` line for the modules under `roots`; None where no
    parameter is a DTensor."""
    tensor = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(tensor, "DTensor", None)
    if dtensor is None:
        return None
    params: dict[int, Any] = {}
    for root in roots:
        with contextlib.suppress(Exception):
            params.update((id(p), p) for p in root.parameters())
    placed = [p for p in params.values() if isinstance(p, dtensor)]
    if not placed:
        return None
    placements: Counter[str] = Counter()
    mesh = None
    for p in placed:
        with contextlib.suppress(Exception):
            placements.update(_placement(x) for x in p.placements)
            mesh = mesh or p.device_mesh
    return {
        "t_ns": time.monotonic_ns(),
        "kind": "tensor_parallel",
        "mesh": [int(x) for x in getattr(mesh, "shape", ())],
        "mesh_dims": list(getattr(mesh, "mesh_dim_names", None) or []),
        "placements": dict(placements),
        "params": len(params),
        "sharded_params": len(placed),
        "param_bytes": _bytes(params.values()),
        "sharded_bytes": _bytes(placed),
    }


def _placement(x: Any) -> str:
    """`Shard(0)`, `Replicate()`, `Partial()`: the class and its dimension (torch 2.13 prints `S(0)`)."""
    dim = getattr(x, "dim", None)
    return f"{type(x).__name__}({dim if isinstance(dim, int) else ''})"


def _bytes(params: Iterable[Any]) -> int:
    """Parameters at their full size (a DTensor's `numel` is the global one)."""
    total = 0
    for p in params:
        with contextlib.suppress(Exception):
            total += int(p.numel()) * int(p.element_size())
    return total
