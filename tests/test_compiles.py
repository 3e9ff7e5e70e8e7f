"""torch.compile's recompiles: dynamo's compilation records read from compile.json (`capture/compiles.py`),
grouped into compile ids with the varying dimension named, the steps that compiled left out of the
steady ones, and `compile.recompiles` priced on the run's loop (the end-to-end run is
examples/compile_recompiles.py's)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.compiles import compile_stats
from pinchpoint.analysis.run_time import RunTime, Segment
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Category, Finding, FixKind, facts
from pinchpoint.ingest.compiles import compile_record, mark_compiling
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import Step, StepKind

S = 1_000_000_000
WALL = 1_700_000_000 * S  # the wall clock at the file's clock pair
MONO = 50 * S


def _doc(sizes: list[int], limit_hit: bool = False) -> dict[str, object]:
    """compile.json as dynamo's records give it: frame 0 compiled once per size, forward (its frame)
    and backward (no frame) 2 s each, one a second apart from 10 s before the clock pair."""
    compiles = []
    t_us = (WALL - 10 * S) // 1000
    for i, n in enumerate(sizes):
        reason = f"0/{i - 1}: tensor 'args[0]' size mismatch at index 1. expected {sizes[i - 1]}, actual {n}"
        compiles.append(
            {
                "id": f"0/{i}",
                "frame": "forward",
                "file": "/x/train.py",
                "line": 12,
                "start_us": t_us,
                "duration_us": 400_000,
                "recompile_reason": reason if i else None,
            }
        )
        compiles.append({"id": f"0/{i}", "frame": None, "start_us": t_us + 500_000, "duration_us": 300_000})
        t_us += 1_000_000
    if limit_hit:
        compiles.append(
            {
                "id": f"0/{len(sizes)}",
                "frame": None,
                "start_us": t_us,
                "duration_us": 3000,
                "fail_reason": "Dynamo recompile limit exceeded",
            }
        )
    return {"clock": {"wall_time_ns": WALL, "monotonic_ns": MONO}, "recompile_limit": 8, "compiles": compiles,
            "graph_breaks": {"Tensor.item": 2, "bad": "x"}}  # fmt: skip


def test_the_records_read_onto_the_steps_clock_and_group_by_compile_id() -> None:
    record = compile_record(json.loads(json.dumps(_doc([32, 48, 64, 80], limit_hit=True))))
    assert record is not None and len(record.compilations) == 9
    first = record.compilations[0]
    assert first.start_ns == MONO - 10 * S and first.dur_ns == 400_000_000 and first.site == "/x/train.py:12"
    assert record.graph_breaks == (("Tensor.item", 2),)
    stats = compile_stats(record)
    assert stats is not None
    assert (stats.compiles, stats.recompiles) == (4, 3)
    assert stats.recompile_ns == 3 * 700_000_000 and stats.mean_recompile_ns == 700_000_000
    assert stats.limit_hit and stats.frame == "forward (/x/train.py:12)"
    (vary,) = stats.varying
    assert (vary.tensor, vary.dim, vary.sizes) == ("args[0]", 1, (32, 48, 64, 80))
    for bad in (
        None,
        [],
        {"clock": {}},
        {"clock": {"wall_time_ns": 1, "monotonic_ns": 1}, "compiles": [{"id": 3}]},
    ):
        assert compile_record(bad) is None


def test_steps_that_compiled_are_not_steady() -> None:
    record = compile_record(_doc([32, 48]))
    assert record is not None
    at = MONO - 10 * S
    steps = [
        Step(index=i, kind=StepKind.TRAIN, start_ns=at + i * S, end_ns=at + (i + 1) * S) for i in range(4)
    ]
    marked = mark_compiling(steps, record)
    assert [s.compiled for s in marked] == [True, True, False, False]
    assert mark_compiling(steps, None) == tuple(steps)


def _whole(loop_s: float) -> RunTime:
    return RunTime(
        wall_ns=int((loop_s + 2) * S),
        segments=(Segment(name="start-up", ns=2 * S), Segment(name="training steps", ns=int(loop_s * S))),
    )


def test_recompiles_are_priced_on_the_loop_with_one_dynamic_compile_in_their_place() -> None:
    stats = compile_stats(compile_record(_doc([32, 48, 64, 80, 96, 112], limit_hit=True)))
    rank = replace(make_rank_analysis({"forward": 4, "backward": 6}, 0), compiles=stats, run_time=_whole(10))
    (f,) = [
        f
        for f in diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
        if f.id is Category.COMPILE_RECOMPILES
    ]
    # 5 recompiles of 0.7 s: 3.5 s of a 10 s loop; one more 0.7 s compile in their place saves 2.8 s
    assert f.share == pytest.approx(0.35) and f.estimated_speedup == pytest.approx(10 / 7.2)
    assert f.of_run and f.fix_kind is FixKind.DYNAMIC_SHAPES
    said = say(next(e for e in f.evidence if e.key == "compile.recompiles.varying"))
    assert "args[0] at dimension 1" in said and "32, 48, 64, 80, 96, 112" in said
    assert "recompile_limit (8)" in say(next(e for e in f.evidence if e.key == "compile.recompiles.limit"))
    assert facts(f)["compile.recompiles.priced"]["saved_ns"] == pytest.approx(2.8e9)
    assert "mark_dynamic(x, 1)" in say(f.snippet) and "dynamic=None" in say(f.fix)


def test_one_recompile_or_a_little_time_is_no_finding() -> None:
    def found(sizes: list[int], loop_s: float) -> list[object]:
        stats = compile_stats(compile_record(_doc(sizes)))
        rank = replace(make_rank_analysis({"forward": 4}, 0), compiles=stats, run_time=_whole(loop_s))
        out = diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
        return [f for f in out if f.id is Category.COMPILE_RECOMPILES]

    assert found([32, 48], 10) == []  # dynamo's own way to a dynamic graph (dynamic=None)
    assert found([32, 48, 64, 80], 100) == []  # 2.1 s of a 100 s loop


def _broken_doc() -> dict[str, object]:
    """compile.json of a model whose block reads `.item()`: the outer frame and the block's frame
    restart at the break, and two resume frames compile (the block's twice: its float specialised once)."""
    t_us = (WALL - 10 * S) // 1000
    item = "Unsupported Tensor.item() call with capture_scalar_outputs=False"

    def c(cid: str, frame: str, line: int, reasons: list[str] | None = None) -> dict[str, object]:
        return {"id": cid, "frame": frame, "file": "/x/train.py", "line": line, "start_us": t_us,
                "duration_us": 100_000, "restart_reasons": reasons or []}  # fmt: skip

    compiles = [
        c("0/0", "forward", 59, [item]),
        c("1/0", "forward", 44, [item]),
        c("2/0", "torch_dynamo_resume_in_forward_at_48", 48),
        c("2/1", "torch_dynamo_resume_in_forward_at_48", 48),
        c("3/0", "torch_dynamo_resume_in_forward_at_60", 60),
        {"id": "4/0", "frame": "torch_dynamo_resume_in_wrapped_at_9", "file": "/site/pinchpoint/capture/hooks.py",
         "line": 9, "start_us": t_us, "duration_us": 1000},
    ]  # fmt: skip
    return {"clock": {"wall_time_ns": WALL, "monotonic_ns": MONO}, "compiles": compiles}


def test_graph_breaks_are_named_by_the_line_dynamo_resumed_at() -> None:
    record = compile_record(json.loads(json.dumps(_broken_doc())))
    assert record is not None and record.compilations[0].restart_reasons[0].startswith(
        "Unsupported Tensor.item()"
    )
    stats = compile_stats(record)
    assert stats is not None
    assert [(b.function, b.site) for b in stats.breaks] == [
        ("forward", "/x/train.py:48"),
        ("forward", "/x/train.py:60"),
    ]
    assert all(b.reason and "Tensor.item()" in b.reason for b in stats.breaks)
    assert stats.frames == 5  # frames 0-4 (pinchpoint's own resume frame is no break of the program's)
    bad = _broken_doc()
    bad["compiles"][0]["restart_reasons"] = "not a list"  # type: ignore[index]
    again = compile_record(json.loads(json.dumps(bad)))
    assert again is not None and again.compilations[0].restart_reasons == ()


def _cold_doc(caches: object, fx_miss: int = 1) -> dict[str, object]:
    """As examples/compile_cold_cache.py's run wrote it: one frame compiled (16.9 s, 16.5 of it in the
    backend), its backward compiled lazily (4.4 s), the caches on and missed."""
    t_us = (WALL - 30 * S) // 1000
    forward = {
        "id": "0/0",
        "frame": "forward",
        "file": "/x/train.py",
        "line": 12,
        "start_us": t_us,
        "duration_us": 16_864_000,
        "dynamo_us": 16_864_000,
        "backend_us": 16_541_000,
        "cache": {"fx_hit": 0, "fx_miss": fx_miss, "aot_hit": 0, "aot_miss": fx_miss},
    }
    backward = {
        "id": "0/0",
        "frame": None,
        "start_us": t_us + 17_000_000,
        "duration_us": 4_411_000,
        "backend_us": None,
        "cache": {"fx_miss": fx_miss, "aot_miss": "x"},
    }
    return {"clock": {"wall_time_ns": WALL, "monotonic_ns": MONO}, "compiles": [forward, backward],
            "caches": caches}  # fmt: skip


def test_a_compilation_that_missed_caches_that_were_on_is_cold() -> None:
    """The backend's time of compilations that missed (a lazily compiled backward is all backend) is
    what a warm cache would load; caches turned off, or that hit, are not cold."""
    on = {"fx_graph": True, "autograd": True, "force_disabled": False, "dir": "/tmp/inductor-cache-x1"}
    record = compile_record(_cold_doc(on))
    assert record is not None and record.caches is not None
    assert record.caches.on is True and record.caches.directory == "/tmp/inductor-cache-x1"
    stats = compile_stats(record)
    assert stats is not None and stats.cold is not None
    assert stats.cold.backend_ns == (16_541_000 + 4_411_000) * 1000 and stats.cold.misses == 3
    off = dict(on, force_disabled=True)
    for caches, misses in ((off, 1), (on, 0), ({"fx_graph": "?"}, 1), ("hostile", 1), (None, 1)):
        stats = compile_stats(compile_record(_cold_doc(caches, fx_miss=misses)))
        assert stats is not None and stats.cold is None, (caches, misses)


def test_a_cold_compile_that_holds_the_run_is_priced_on_its_wall_clock() -> None:
    on = {"fx_graph": True, "autograd": True, "force_disabled": False, "dir": "/tmp/inductor-cache-x1"}
    stats = compile_stats(compile_record(_cold_doc(on)))
    whole = RunTime(
        wall_ns=27 * S,
        segments=(
            Segment(name="start-up", ns=4 * S),
            Segment(name="compiling", ns=21 * S),
            Segment(name="training steps", ns=2 * S, count=60),
        ),
    )
    rank = replace(make_rank_analysis({"forward": 4, "backward": 6}, 0), compiles=stats, run_time=whole)
    findings = diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
    (found,) = [f for f in findings if f.id is Category.COMPILE_TIME]
    assert findings[0] is found  # once a run, priced on the wall clock: ahead of anything in 2 s of steps
    saved = 0.9 * (16_541_000 + 4_411_000) * 1000
    assert found.estimated_speedup == pytest.approx(27 * S / (27 * S - saved))
    assert found.fix_kind is FixKind.COMPILE_CACHE and found.of_run
    assert "TORCHINDUCTOR_CACHE_DIR" in say(found.fix) and "/tmp/inductor-cache-x1" in say(found.fix)


VALUE_GUARD = Path(__file__).parent / "data" / "compile" / "value_guard.json"
"""compile.json of a real run of examples/compile_value_guard.py (12 steps, torch 2.13, caches off): the
code after an `.item()` break recompiled for each value read, 1/1 to 1/7, then 1/8 hit the limit."""


def _value_guard_finding(loop_s: float) -> list[Finding]:
    stats = compile_stats(compile_record(json.loads(VALUE_GUARD.read_text())))
    rank = replace(make_rank_analysis({"forward": 4}, 0), compiles=stats, run_time=_whole(loop_s))
    found = diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
    return [f for f in found if f.id is Category.COMPILE_RECOMPILES]


def test_a_frame_recompiled_for_each_value_read_at_its_break_is_priced_whole_with_the_break_as_its_fix() -> (
    None
):
    doc = json.loads(VALUE_GUARD.read_text())
    resumed = [c for c in doc["compiles"] if c["id"].startswith("1/")]
    stats = compile_stats(compile_record(doc))
    assert stats is not None and stats.limit_hit
    vg = stats.value_guard
    assert vg is not None and vg.site == "examples/compile_value_guard.py:60"
    assert vg.frame.startswith("torch_dynamo_resume_in_forward_at_60")
    assert vg.recompiles == 7  # 1/1 .. 1/7 compiled; 1/8 gave up
    assert vg.compile_ns == sum(c["duration_us"] for c in resumed) * 1000  # its first compilation included
    (f,) = _value_guard_finding(100)
    assert f.share == pytest.approx(vg.compile_ns / 100e9)
    assert f.estimated_speedup == pytest.approx(100e9 / (100e9 - vg.compile_ns))
    assert f.fix_kind is None  # a code change: no knob removes the break
    fix = say(f.fix)
    assert "torch.where" in fix and "compile_value_guard.py:60" in fix and "do not help" in fix
    assert "value a graph break reads" in say(f.title)
    assert "compile.recompiles.value_limit" in facts(f) and "compile.recompiles.varying" not in facts(f)
    reason = say(next(e for e in f.evidence if e.key == "compile.recompiles.reason"))
    assert "___stack0 ==" in reason and "\n" not in reason
    assert _value_guard_finding(800) == []  # 70 s of an 800 s loop: under 10%
