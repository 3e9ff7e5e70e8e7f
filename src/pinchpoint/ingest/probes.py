"""Reads a rank's probes.json: what the agent measured after the op window (dispatch cost, matmul and
memory ceilings, page-fault cost), with live_tensors.json (two snapshots, once memory rose)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pinchpoint.ingest.fields import as_dict, as_int, as_list
from pinchpoint.trace.run import ConvProbe, LiveTensors, LoaderTransfer, MatmulProbe, Probes, TensorGroup

LIVE_FILE = "live_tensors.json"


def _live(o: Any) -> LiveTensors | None:
    if not isinstance(o, dict):
        return None
    count, nbytes, graph, graph_bytes = (
        as_int(o.get(k)) for k in ("count", "bytes", "with_graph", "graph_bytes")
    )
    if count is None or nbytes is None or graph is None or graph_bytes is None:
        return None
    groups = []
    for item in as_list(o.get("graph_groups")):
        g = as_dict(item)
        shape = [as_int(d) for d in as_list(g.get("shape"))]
        n, b = as_int(g.get("count")), as_int(g.get("bytes"))
        if n is None or b is None or any(d is None for d in shape):
            continue
        groups.append(
            TensorGroup(
                shape=tuple(d for d in shape if d is not None), dtype=str(g.get("dtype")),
                grad_fn=str(g.get("grad_fn")), count=n, bytes=b,
            )
        )  # fmt: skip
    return LiveTensors(
        count=count, bytes=nbytes, with_graph=graph, graph_bytes=graph_bytes, graph_groups=tuple(groups)
    )


def read_probes(o: dict[str, Any]) -> Probes:
    mm = []
    for item in as_list(o.get("matmul")):
        m = as_dict(item)
        dims = [as_int(x) for x in as_list(m.get("shape"))]
        ns = as_int(m.get("ns"))
        if len(dims) == 3 and ns is not None and ns > 0:
            a, b, c = (d or 0 for d in dims)
            if min(a, b, c) > 0:
                mm.append(MatmulProbe(shape=(a, b, c), dtype=str(m.get("dtype")), ns=ns))
    fault_ns = as_int(o.get("page_fault_ns"))
    bw = o.get("memory_bytes_per_s")
    live = as_dict(o.get("live_tensors"))
    return Probes(
        live_before=_live(live.get("before")),
        live_after=_live(live.get("after")),
        window_steps=as_int(live.get("steps")),
        dispatch_ns_per_op=as_int(o.get("dispatch_ns_per_op")),
        matmul=tuple(mm),
        page_fault_ns=fault_ns if fault_ns is not None and fault_ns > 0 else None,
        memory_bytes_per_s=float(bw)
        if isinstance(bw, (int, float)) and math.isfinite(bw) and bw > 0
        else None,
        loader_transfer=_transfer(as_dict(o.get("loader_transfer"))),
        conv=tuple(c for c in (_conv(as_dict(x)) for x in as_list(o.get("conv"))) if c is not None),
    )


def _conv(o: dict[str, Any]) -> ConvProbe | None:
    x = [as_int(d) for d in as_list(o.get("input"))]
    w = [as_int(d) for d in as_list(o.get("weight"))]
    ns = as_int(o.get("ns"))
    if len(x) != 4 or len(w) != 4 or any(d is None or d <= 0 for d in x + w) or ns is None or ns <= 0:
        return None
    return ConvProbe(
        input=tuple(d or 0 for d in x), weight=tuple(d or 0 for d in w), dtype=str(o.get("dtype")), ns=ns
    )


def _transfer(o: dict[str, Any]) -> LoaderTransfer | None:
    size, worker, receive = (
        as_int(o.get("batch_bytes")),
        as_int(o.get("worker_ns")),
        as_int(o.get("receive_ns")),
    )
    if size is None or worker is None or receive is None or size < 0 or worker <= 0 or receive < 0:
        return None
    batched = as_int(o.get("batched_ns"))
    return LoaderTransfer(
        batch_bytes=size,
        worker_ns=worker,
        receive_ns=receive,
        batched_ns=batched if batched is not None and batched > 0 else None,
    )


def probed_device(rank_dir: Path) -> str | None:
    """The device a rank's probes ran on (`probes.json`'s "device": "cpu", "cuda", ...); None when
    the file is missing or unreadable or names none."""
    try:
        device = json.loads((rank_dir / "probes.json").read_text()).get("device")
    except (OSError, ValueError, AttributeError):
        return None
    return device if isinstance(device, str) else None
