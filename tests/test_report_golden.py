"""Golden tests: a committed run directory in, the whole report.json and terminal text out.

The run directories in tests/data/rundirs/ are small hand-planned runs (see make_rundirs.py there).
The expected outputs live in tests/golden/. To accept a deliberate change of the report, rerun with

    PINCHPOINT_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_report_golden.py

and review the diff of tests/golden/ before committing it.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.pipeline.rundir import REPORT_NAME, report_run_dir
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.report.model import Report
from pinchpoint.report.terminal import render

HERE = Path(__file__).resolve().parent
RUNDIRS = HERE / "data" / "rundirs"
GOLDEN = HERE / "golden"
REGEN = os.environ.get("PINCHPOINT_REGEN_GOLDEN") == "1"
NAMES = ["fetch_bound", "two_causes", "crashed"]

# The report contract (DESIGN.md, "Report contract" and "Bottleneck categories").
SCHEMA = "pinchpoint.report/1"
TOP_LEVEL = {"schema", "run", "environment", "steps", "breakdown", "ranks", "findings"}
CATEGORIES = {
    "input.fetch",
    "input.preprocess",
    "host.python",
    "host.dispatch",
    "host.sync",
    "transfer.h2d",
    "compute.math",
    "compute.memory",
    "comm.exposed",
    "imbalance.straggler",
    "memory.leak",
    "memory.pressure",
    "cpu.oversubscription",
    "cpu.underuse",
    "io.checkpoint",
}
CONFIDENCES = {"high", "medium", "low"}


def _report(name: str, tmp_path: Path) -> dict[str, Any]:
    src = RUNDIRS / name
    if not (src / "meta.json").is_file():
        pytest.fail(
            f"fixture run directory {src} is missing; recreate it with "
            f"`python {RUNDIRS / 'make_rundirs.py'}` and commit it"
        )
    run_dir = tmp_path / name  # same folder name as the fixture: warnings may mention it
    shutil.copytree(src, run_dir)
    report = report_run_dir(run_dir).to_dict()
    assert json.loads((run_dir / REPORT_NAME).read_text()) == report, (
        "report.json differs from the returned report"
    )
    return report


def _text(report: dict[str, Any]) -> str:
    buf = io.StringIO()
    render(Report.read(report), buf, color=False, width=100)
    return buf.getvalue()


def _compare(actual: str, golden: Path) -> None:
    if REGEN:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual)
        return
    if not golden.is_file():
        pytest.fail(
            f"golden file {golden} is missing; create it with PINCHPOINT_REGEN_GOLDEN=1 "
            f"python -m pytest {Path(__file__).name}, review it, and commit it"
        )
    assert actual == golden.read_text(), (
        f"output differs from {golden} (regenerate with PINCHPOINT_REGEN_GOLDEN=1)"
    )


@pytest.mark.parametrize("name", NAMES)
def test_report_json_golden(name: str, tmp_path: Path) -> None:
    report = _report(name, tmp_path)
    _compare(
        json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n", GOLDEN / f"{name}.json"
    )


@pytest.mark.parametrize("name", NAMES)
def test_terminal_golden(name: str, tmp_path: Path) -> None:
    _compare(_text(_report(name, tmp_path)), GOLDEN / f"{name}.txt")


@pytest.mark.parametrize("name", NAMES)
def test_report_follows_the_contract(name: str, tmp_path: Path) -> None:
    report = _report(name, tmp_path)
    assert_contract(report)


def assert_contract(report: dict[str, Any]) -> None:
    json.dumps(report, allow_nan=False)  # strict JSON: no NaN or Infinity
    assert set(report) >= TOP_LEVEL, TOP_LEVEL - set(report)
    assert report["schema"] == SCHEMA
    run = report["run"]
    assert {"command", "exit_code", "started_at", "world_size"} <= set(run)
    assert isinstance(run["command"], list) and all(isinstance(c, str) for c in run["command"])
    assert isinstance(run["world_size"], int) and run["world_size"] >= 1
    env = report["environment"]
    assert {"cpu", "gpus", "torch", "threads", "python"} <= set(env)
    steps = report["steps"]
    assert steps["kind"] in ("train", "inference", "explicit")
    assert isinstance(steps["count"], int) and steps["count"] > 0
    assert steps["median_ms"] <= steps["p90_ms"]
    _assert_breakdown(report["breakdown"])
    assert [r["rank"] for r in report["ranks"]] == sorted(r["rank"] for r in report["ranks"])
    for r in report["ranks"]:
        _assert_breakdown(r["breakdown"])
    findings = report["findings"]
    speedups = [f["estimated_speedup"] for f in findings]
    assert speedups == sorted(speedups, reverse=True)
    for f in findings:
        assert f["id"] in CATEGORIES, f["id"]
        assert isinstance(f["title"], str) and f["title"]
        assert isinstance(f["share"], float | int) and 0.0 <= f["share"] <= 1.0
        assert isinstance(f["estimated_speedup"], float | int) and f["estimated_speedup"] >= 1.0
        assert f["confidence"] in CONFIDENCES
        assert (
            isinstance(f["evidence"], list)
            and f["evidence"]
            and all(isinstance(e, str) for e in f["evidence"])
        )
        assert isinstance(f["fix"], str) and f["fix"]
        assert isinstance(f["ranks"], list) and all(
            isinstance(r, int) and not isinstance(r, bool) for r in f["ranks"]
        )
    assert len({f["id"] for f in findings}) == len(findings)


def _assert_breakdown(bd: dict[str, float]) -> None:
    assert bd, "empty breakdown"
    assert all(0.0 <= v <= 1.0 for v in bd.values())
    assert math.fsum(bd.values()) == pytest.approx(1.0, abs=0.01)


# ----------------------------------------------------------------- what each fixture plants


def _ids(report: dict[str, Any]) -> list[str]:
    return [f["id"] for f in report["findings"]]


def test_fetch_bound_names_the_sleeping_loader(tmp_path: Path) -> None:
    report = _report("fetch_bound", tmp_path)
    assert _ids(report)[0] == "input.fetch"
    assert "input.preprocess" not in _ids(report)
    assert report["breakdown"]["data_wait"] == pytest.approx(0.40, abs=1e-3)


def test_two_causes_reports_both_and_their_shares_add_up(tmp_path: Path) -> None:
    report = _report("two_causes", tmp_path)
    by_id = {f["id"]: f for f in report["findings"]}
    assert {"input.preprocess", "host.python"} <= set(by_id)
    assert report["breakdown"]["data_wait"] + report["breakdown"]["host_other"] == pytest.approx(
        0.55, abs=1e-3
    )
    # host.python excludes the framework ops (loss, .item()) that ran outside every module.
    assert by_id["input.preprocess"]["share"] + by_id["host.python"]["share"] == pytest.approx(0.52, abs=1e-3)


def test_crashed_run_is_partial_but_reported(tmp_path: Path) -> None:
    report = _report("crashed", tmp_path)
    assert report["run"]["exit_code"] == 1 and report["run"]["complete"] is False
    assert report["steps"]["count"] == 10  # 13 steps: 2 warm-up, 1 partial left out
    assert {"io.checkpoint", "memory.leak"} <= set(_ids(report))
    assert any("steps.jsonl" in w for w in report["warnings"])
    assert any("system.jsonl" in w for w in report["warnings"])
    assert "program exited with 1: partial report" in _text(report)


def test_report_does_not_depend_on_the_run_dir_location(tmp_path: Path) -> None:
    reports = []
    for where in ("a/crashed", "b/renamed"):
        run_dir = tmp_path / where
        shutil.copytree(RUNDIRS / "crashed", run_dir)
        reports.append(report_run_dir(run_dir).to_dict())
    assert reports[0] == reports[1]


# ------------------------------------------------------------- pinchpoint analyze (real traces)

TRACES = HERE / "data" / "traces"
TRACE_GOLDENS = {
    "analyze_resnet50_nw0": TRACES / "kineto_tb_plugin" / "resnet50_num_workers_0",
    "analyze_trace_filter_2ranks": TRACES / "hta" / "trace_filter",
    "analyze_bert_small_h100": TRACES
    / "tracelens"
    / "h100"
    / "gaunernst_bert-small-uncased__1016001.json.gz",
}


def _trace_report(name: str) -> dict[str, Any]:
    path = TRACE_GOLDENS[name]
    if path.is_dir() and name.endswith("nw0"):
        path = next(path.glob("*.json.gz"))
    return report_traces(path).to_dict()


def _portable(text: str) -> str:
    return text.replace(str(TRACES), "<tests/data/traces>")


@pytest.mark.parametrize("name", sorted(TRACE_GOLDENS))
def test_analyze_report_golden(name: str) -> None:
    report = _trace_report(name)
    assert_contract(report)
    assert report["run"]["mode"] == "analyze"
    for g in report["gpu"]:
        parts = [g["compute"], g["communication"], g["memory"], g["idle"]]
        assert math.fsum(parts) == pytest.approx(1.0, abs=1e-3)
    # Paths are made portable before rendering: the terminal wraps long lines, so the checkout's
    # location must not reach the text.
    text = _portable(json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    _compare(text, GOLDEN / f"{name}.json")
    _compare(_text(json.loads(text)), GOLDEN / f"{name}.txt")
