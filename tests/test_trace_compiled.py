"""torch.compile read from real profiler traces: compiled regions, recompiles, graph breaks, a frame back to
eager, graph launches counted as the kernels they replay (tests/data/traces: TraceLens's MI300X and vLLM
traces, and two CPU traces written here by `compiled_cpu/make_trace.py` with torch 2.13)."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.analysis.gpu.compiled import compiled_trace
from pinchpoint.analysis.gpu.launch import launch_stats
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.report.phrases.compile_trace import compiled_lines

DATA = Path(__file__).parent / "data" / "traces"
RECOMPILES = DATA / "compiled_cpu" / "recompiles.json.gz"
GRAPH_BREAK = DATA / "compiled_cpu" / "graph_break.json.gz"
TRITON = DATA / "tracelens" / "torch_compile_triton" / "trace.json.gz"
DECODE = DATA / "tracelens" / "inference" / "vllm_decode_full" / "graph_execution.json.gz"
PIECEWISE = DATA / "tracelens" / "inference" / "vllm_prefilldecode_piecewise" / "graph_execution.json.gz"


def raw(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        events: list[dict[str, Any]] = json.load(f)["traceEvents"]
    return events


def test_recompiles_are_read_with_their_ids_steps_and_the_frame_that_gave_up() -> None:
    events = raw(RECOMPILES)
    ids = [
        m.groups()
        for e in events
        if (m := re.match(r"dynamo_data: compile_id=(\d+)/(\d+)", e.get("name", "")))
    ]
    regions = Counter(
        e["name"].split(": ")[1] for e in events if e.get("name", "").startswith("Torch-Compiled Region")
    )
    c = compiled_trace(read_trace(RECOMPILES))
    assert [(str(x.frame), str(x.compile)) for x in c.compilations] == ids
    assert {r.key: r.calls for r in c.regions} == dict(regions)
    assert len(c.recompiles) == len([i for i in ids if i[1] != "0"])
    # frame 1 resumes after the `.item()` break (its regions run inside frame 0's) and is guarded on the
    # value read: it recompiles each step until its compilation 1/8 never runs
    assert c.resumed == (1,)
    assert [(f.frame, f.compile) for f in c.fell_back] == [(1, 8)]
    assert not any(x.ran for x in c.compilations if (x.frame, x.compile) == (1, 8))
    assert all(x.ran for x in c.compilations if (x.frame, x.compile) != (1, 8))
    assert 0 < c.recompile_ns <= c.compiling_ns < c.window_ns
    assert set(c.steps_compiling) == {x.step for x in c.compilations}
    assert c.cache_lookups == sum(e.get("name") == "TorchDynamo Cache Lookup" for e in events)


def test_recompiles_lead_the_report_with_the_frame_back_to_eager(tmp_path: Path) -> None:
    doc = report_traces(RECOMPILES, json_path=tmp_path / "r.json")
    top = doc.findings[0]
    assert top.id == "compile.recompiles"
    assert top.share > 0.5 and top.estimated_speedup > 1.5
    assert any("1/8 never ran" in e and "eagerly" in e for e in top.evidence)
    assert any("Frame 1 ran inside another frame's compiled region" in e for e in top.evidence)
    assert "TORCH_LOGS=recompiles" in top.fix
    assert top.fix_kind == "dynamic_shapes"  # frame 0 recompiles for sizes (dynamic=False)
    written = json.loads((tmp_path / "r.json").read_text())
    compiled = written["gpu"][0]["compiled"]
    assert compiled["fell_back"] == ["1/8"] and compiled["recompilations"] == 11
    assert any("back to eager after 1/8" in line for line in compiled_lines(doc))


def test_a_steady_graph_break_is_priced_on_the_steps_that_compiled_nothing() -> None:
    c = compiled_trace(read_trace(GRAPH_BREAK))
    assert not c.compilations and c.backward
    g = c.steady
    assert g is not None and g.steps == 8
    assert g.breaks == 1 and g.calls == 4  # two forward regions, two compiled backwards a step
    assert 0 < g.inside_ns < g.step_ns
    doc = report_traces(GRAPH_BREAK)
    ids = [f.id for f in doc.findings]
    assert "compile.graph_breaks" in ids and "compile.recompiles" not in ids
    # frame 0's region is its compilation 0/4, made before the profiler recorded
    assert [r.key for r in c.regions if r.compile > 0] == ["0/4"]
    assert any(n.startswith("compiled region 0/4 ran") for n in doc.notes)


def test_a_region_of_a_recompile_made_before_the_trace_gets_a_note() -> None:
    doc = report_traces(TRITON)
    assert doc.gpu is not None and doc.gpu[0].compiled is not None
    assert [(r.region, r.calls) for r in doc.gpu[0].compiled.regions] == [("0/0", 1)]
    assert doc.gpu[0].compiled.cache_lookups == 1
    assert not any("recompile, made before" in n for n in doc.notes)  # 0/0 is a first compilation


@pytest.mark.parametrize(("path", "launches"), [(DECODE, 1), (PIECEWISE, 25)])
def test_graph_launches_count_the_kernels_they_replay(path: Path, launches: int) -> None:
    events = raw(path)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    graph = {e["args"]["correlation"] for e in events if e.get("name") == "hipGraphLaunch"}
    replayed = [k for k in kernels if k["args"].get("correlation") in graph]
    trace = read_trace(path)
    c = compiled_trace(trace)
    assert c.graph_launches == len(graph) == launches
    assert c.graph_kernels == len(replayed)
    assert c.graph_kernel_ns == pytest.approx(sum(k["dur"] for k in replayed) * 1000, rel=1e-6)
    assert launch_stats(trace).kernels == len(kernels)  # every kernel counted, the replayed ones too


def test_the_split_of_graph_replays_matches_tracelens() -> None:
    rows = dict(
        line.split(",")[:2]
        for line in (DECODE.parent / "perf_csvs" / "gpu_timeline.csv").read_text().splitlines()[1:]
    )
    doc = report_traces(DECODE)
    assert doc.gpu is not None
    g = doc.gpu[0]
    assert g.span_ms == pytest.approx(float(rows["total_time"]), rel=0.01)
    assert g.compute * g.span_ms == pytest.approx(float(rows["computation_time"]), rel=0.01)
    assert doc.environment.gpus and all(not x.name for x in doc.environment.gpus)
    assert doc.to_dict()["gpu"][0]["compiled"]["graph_kernels"] == 421
