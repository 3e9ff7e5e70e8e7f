"""distributed.jsonl's lines about parallelism beyond DDP: the `fsdp` line (`capture/fsdp.py`) and the
`pipeline` line (`capture/dist_hooks.pipeline_settings`), the `tensor_parallel` line
(`capture/tensor_parallel.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pinchpoint.ingest.fields import as_int, as_list, as_str
from pinchpoint.trace.parallel import FsdpConfig, PipelineConfig, TensorParallelConfig


def fsdp_config(lines: Iterable[dict[str, Any]]) -> FsdpConfig | None:
    """The last `fsdp` line as an FsdpConfig; None without one (or with one that is not that)."""
    found = None
    for o in lines:
        if o.get("kind") != "fsdp":
            continue
        modules = as_int(o.get("modules"))
        if modules is None or modules <= 0:
            continue
        found = FsdpConfig(
            modules=modules,
            resharding=max(0, min(modules, as_int(o.get("resharding"), 0) or 0)),
            mesh=tuple(x for x in (as_int(v) for v in as_list(o.get("mesh"))) if x is not None and x > 0),
            mesh_dims=tuple(str(v) for v in as_list(o.get("mesh_dims")) if isinstance(v, str)),
            param_dtype=as_str(o.get("param_dtype")),
            reduce_dtype=as_str(o.get("reduce_dtype")),
            param_bytes=max(0, as_int(o.get("param_bytes"), 0) or 0),
        )
    return found


def pipeline_config(lines: Iterable[dict[str, Any]]) -> PipelineConfig | None:
    """The first `pipeline` line as a PipelineConfig; None without one (or with one that is not that)."""
    for o in lines:
        if o.get("kind") != "pipeline":
            continue
        m, p, name = as_int(o.get("microbatches")), as_int(o.get("stages")), as_str(o.get("schedule"))
        if m is None or p is None or name is None or m <= 0 or p <= 0:
            continue
        indices = tuple(x for x in (as_int(v) for v in as_list(o.get("stage_indices"))) if x is not None)
        return PipelineConfig(schedule=name, microbatches=m, stages=p, stage_indices=indices)
    return None


def tensor_parallel_config(lines: Iterable[dict[str, Any]]) -> TensorParallelConfig | None:
    """The last `tensor_parallel` line as a TensorParallelConfig; None without one (or not that)."""
    found = None
    for o in lines:
        if o.get("kind") != "tensor_parallel":
            continue
        mesh = [x for x in (as_int(v) for v in as_list(o.get("mesh"))) if x is not None and x > 0]
        sharded = as_int(o.get("sharded_params"))
        if len(mesh) != 1 or mesh[0] < 2 or not sharded or sharded < 0:
            continue  # (one dimension, split over ranks: a 2-D mesh is not read yet)
        raw = o.get("placements")
        placements = raw if isinstance(raw, dict) else {}
        found = TensorParallelConfig(
            degree=mesh[0],
            mesh_dims=tuple(str(v) for v in as_list(o.get("mesh_dims")) if isinstance(v, str)),
            placements=tuple(
                (str(k), n) for k, v in sorted(placements.items()) if (n := as_int(v)) is not None and n > 0
            ),
            sharded_params=sharded,
            param_bytes=max(0, as_int(o.get("param_bytes"), 0) or 0),
            sharded_bytes=max(0, as_int(o.get("sharded_bytes"), 0) or 0),
        )
    return found
