"""Collectives by kind and by the phase that issued them, read from real traces: HTA's DDP trace on an
A100 (all-reduces launched from autograd's engine, broadcasts from DDP's forward) and its sampled
128-rank trace (send/recv in forward, backward and the optimizer)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.analysis.gpu.collectives import collective_use, kind_of
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.report.phrases.gpu import collective_lines

DATA = Path(__file__).parent / "data" / "traces" / "hta"
DDP = DATA / "nccl_parser_config" / "nccl_data.json.gz"
SAMPLED = DATA / "trace_filter" / "sampled_rank-0.json.gz"


def _phases_by_hand(path: Path) -> dict[tuple[str, str], int]:
    """Each NCCL kernel's launch call and the host ranges holding it, from the JSON itself."""
    events: list[dict[str, Any]] = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    ranges = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
    out: dict[tuple[str, str], int] = {}
    for k in (e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")):
        call = launches[k["args"]["correlation"]]
        held = [
            r["name"]
            for r in ranges
            if r["tid"] == call["tid"] and r["ts"] <= call["ts"] <= r["ts"] + r["dur"]
        ]
        phase = (
            "backward"
            if any(n.startswith("autograd::engine::evaluate_function") for n in held)
            else "forward"
        )
        kind = "all_reduce" if "AllReduce" in k["name"] else "broadcast" if "Broadcast" in k["name"] else "?"
        out[(kind, phase)] = out.get((kind, phase), 0) + 1
    return out


def test_ddp_all_reduces_are_backward_and_its_broadcasts_forward() -> None:
    used = collective_use(read_trace(DDP))
    assert (
        {(c.kind, c.phase): c.count for c in used}
        == _phases_by_hand(DDP)
        == {
            ("all_reduce", "backward"): 15,
            ("broadcast", "forward"): 6,
        }
    )
    for c in used:
        assert 0 <= c.exposed_ns <= c.ns
    reduce = next(c for c in used if c.kind == "all_reduce")
    assert reduce.exposed_ns < reduce.ns  # DDP's buckets overlap backward's compute in part


def test_the_report_and_the_terminal_name_them() -> None:
    doc = report_traces(DDP)
    assert doc.gpu is not None and doc.gpu[0].collectives is not None
    rows = {(r.kind, r.phase): r for r in doc.gpu[0].collectives}
    assert rows[("all_reduce", "backward")].count == 15
    (line,) = collective_lines(doc)
    assert line.startswith("collectives: all-reduce in backward ×15")


def test_every_phase_of_a_sampled_trace_is_placed() -> None:
    used = collective_use(read_trace(SAMPLED))
    assert {c.phase for c in used} == {"forward", "backward", "optimizer"} and {c.kind for c in used} == {
        "send_recv"
    }


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "all_reduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", "reduce_scatter"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)", "send_recv"),
        ("ncclDevKernel_Broadcast_RING_LL(x)", "broadcast"),
        ("void vllm::cross_device_reduce_1stage<float, 8>(...)", "all_reduce"),
        ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ],
)
def test_a_kernel_is_named_by_its_kind(name: str, kind: str) -> None:
    assert kind_of(name) == kind


def test_the_exposed_communication_finding_names_the_kind_and_phase_that_left_it_exposed() -> None:
    doc = report_traces(DDP)
    comm = next(f for f in doc.findings if f.id == "comm.exposed")
    said = next(e for e in comm.evidence if e.startswith("Exposed, by kind"))
    assert said.index("all-reduce in backward") < said.index("broadcast in forward")  # most exposed first


def test_collectives_without_launch_calls_are_counted_in_no_phase() -> None:
    """A device timeline without host launch calls (an XProf TPU plane, a trace cut at the host) keeps
    its collectives, phase `unknown`."""
    from dataclasses import replace

    import numpy as np

    trace = read_trace(DDP)
    ev = trace.events
    device_only = np.flatnonzero(np.isin(ev.kind, (3, 4, 5)))  # kernels, copies, memsets
    fields = ("kind", "name", "pid", "tid", "start_ns", "dur_ns", "correlation", "external_id", "device",
              "stream", "copy_kind", "host_memory", "bytes")  # fmt: skip
    table = type(ev)(names=ev.names, **{f: getattr(ev, f)[device_only] for f in fields})
    used = collective_use(replace(trace, events=table))
    assert {(c.kind, c.phase): c.count for c in used} == {
        ("all_reduce", "unknown"): 15,
        ("broadcast", "unknown"): 6,
    }
