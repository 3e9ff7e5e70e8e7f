"""Comparing runs: the significance test on step times, the diff of two reports, and the history
database (SQLite, concurrent writers)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from conftest import report_doc
from pinchpoint.compare.diff import RunSide, diff_runs, gate, verdict
from pinchpoint.history import store
from pinchpoint.report.diff_doc import SCHEMA, DiffDoc, build_diff, diff_schema
from pinchpoint.report.report_doc import Segment
from pinchpoint.stats.bootstrap import NOISE_FLOOR, ratio_test


def _steps(median_ms: float, n: int = 150, noise: float = 0.05, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in median_ms * 1e6 * (1 + noise * rng.standard_normal(n))]


@pytest.mark.parametrize(
    ("after_ms", "significant"),
    [
        (20.0, False),  # the same program again
        (
            20.0 * 1.015,
            False,
        ),  # 1.5% slower: many steps make it "real" within one run, but runs differ that much
        (20.0 * 1.10, True),  # 10% slower
        (20.0 / 1.5, True),  # ×1.5 faster
    ],
)
def test_a_change_is_significant_only_beyond_interval_and_noise_floor(
    after_ms: float, significant: bool
) -> None:
    t = ratio_test(_steps(20.0, seed=1), _steps(after_ms, seed=2))
    assert t.significant is significant
    assert t.low <= t.ratio <= t.high
    assert abs(t.ratio - 20.0 / after_ms) < 0.03


def test_two_steps_are_never_significant() -> None:
    assert not ratio_test([10, 10], [20, 20]).significant
    with pytest.raises(ValueError):
        ratio_test([], [1])


def _report(
    top: list[tuple[str, float, float]], breakdown: dict[str, float], mean_ms: float, **env: Any
) -> Any:
    environment: dict[str, Any] = {
        "cpu": {"model": "Xeon", "usable_cores": 2, "logical_cores": 2},
        "python": "3.11.7",
        "threads": {"intra_op": 2, "inter_op": 2, "env": {}},
        "gpus": [],
    }
    for k, v in env.items():
        environment[k] = v
    return report_doc({
        "run": {"world_size": 1},
        "environment": environment,
        "steps": {"median_ms": mean_ms, "mean_ms": mean_ms},
        "breakdown": breakdown,
        "findings": [{"id": i, "share": s, "estimated_speedup": e} for i, s, e in top],
    })  # fmt: skip
BEFORE = _report(
    [("input.fetch", 0.42, 1.7), ("host.python", 0.32, 1.5)], {"data_wait": 0.42, "host_other": 0.58}, 54.0
)
AFTER = _report([("host.python", 0.51, 2.0)], {"data_wait": 0.03, "host_other": 0.97}, 32.0,
                dataloader={"num_workers": 4})  # fmt: skip


def test_the_diff_says_when_the_bottleneck_moved() -> None:
    d = diff_runs(
        RunSide(label="A", report=BEFORE, step_ns=tuple(_steps(54.0))),
        RunSide(label="B", report=AFTER, step_ns=tuple(_steps(32.0, seed=3))),
    )
    assert d.test.significant and d.speedup > 1.6
    assert (d.before_top, d.after_top, d.shifted) == ("input.fetch", "host.python", True)
    assert d.environment_differences == () and d.setting_changes == (
        "DataLoader: num_workers=0 → num_workers=4",
    )
    phases = {p.phase: p for p in d.phases}
    assert (
        abs(phases["data_wait"].before_ms - 0.42 * 54.0) < 1e-9
        and abs(phases["data_wait"].after_ms - 0.96) < 1e-9
    )
    lines = verdict(d)
    assert lines[0].startswith("B is ×1.") and "faster than A" in lines[0]
    assert lines[1] == (
        "The bottleneck moved: input.fetch is no longer found; host.python now leads at 51% of the step "
        "(its fix: est. ×2.00)"
    )
    j = build_diff(d).to_dict()
    jsonschema.Draft202012Validator(diff_schema()).validate(j)
    assert DiffDoc.from_dict(j).to_dict() == j
    assert j["schema"] == SCHEMA and j["shifted"] is True and j["significant"] is True
    assert set(j) >= {
        "speedup",
        "significant",
        "before_top",
        "after_top",
        "shifted",
        "environment_differences",
    }


def test_different_machines_make_the_comparison_suspect() -> None:
    other = _report([("input.fetch", 0.40, 1.7)], {"data_wait": 0.4}, 54.0,
                    torch={"version": "2.12.0+cpu", "cuda": None}, python="3.12.1")  # fmt: skip
    d = diff_runs(
        RunSide(label="A", report=BEFORE, step_ns=tuple(_steps(54.0))),
        RunSide(label="B", report=other, step_ns=tuple(_steps(54.0, seed=4))),
    )
    assert not d.test.significant and not d.shifted
    assert d.environment_differences == ("torch: 2.13.0+cpu → 2.12.0+cpu", "Python: 3.11.7 → 3.12.1")
    text = verdict(d)
    assert text[0].startswith("No significant change") and f"{NOISE_FLOOR:.0%}" in text[0]
    assert text[-1].startswith("The runs ran on different hardware or software")


def _side(label: str, median_ms: float, seed: int) -> RunSide:
    return RunSide(label=label, report=BEFORE, step_ns=tuple(_steps(median_ms, noise=0.02, seed=seed)))


def test_the_gate_fails_a_real_regression_and_passes_noise() -> None:
    base = _side("#1", 30.0, 1)
    slower = gate([base], _side("new", 36.0, 2), 0.05)
    assert slower.failed and "% slower than #1" in slower.reason and "beyond the noise" in slower.reason
    assert not gate([base], _side("new", 30.5, 3), 0.05).failed  # 1.7%: below the floor
    assert not gate([base], _side("new", 31.2, 3), 0.05).failed  # 4%: beyond the noise, within 5%
    assert not gate([base], _side("new", 25.0, 4), 0.05).failed  # faster


def test_several_baselines_measure_how_much_the_runs_differ_by_themselves() -> None:
    # This program's runs land anywhere between 30 and 33.6 ms: a run at 33.7 ms is one of them.
    baselines = [_side("#1", 30.0, 1), _side("#2", 33.6, 2), _side("#3", 31.0, 3)]
    noisy = gate(baselines, _side("new", 33.7, 4), 0.05)
    assert not noisy.failed and "3 baselines differ by up to 8." in noisy.reason, noisy.reason
    assert noisy.diff.before == "#3"  # the typical baseline is the one compared
    assert gate(baselines, _side("new", 40.0, 5), 0.05).failed


# ------------------------------------------------------------------------------------------- history


def test_history_records_lists_and_loads(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    report = {"run": {"started_at": "2026-11-30T10:00:00", "command": ["python", "t.py"]},
              "steps": {"median_ms": 12.5}, "findings": [{"id": "host.python"}]}  # fmt: skip
    first = store.record(tmp_path / "run1", report, [1, 2, 3], path=db)
    again = store.record(tmp_path / "run1", {**report, "steps": {"median_ms": 13.0}}, [4, 5], path=db)
    other = store.record(tmp_path / "run2", report, [7], path=db)
    assert first == again and other == first + 1  # rebuilding a report updates its row
    rows = store.list_runs(path=db)
    assert (
        [r.id for r in rows] == [other, first] and rows[1].median_ms == 13.0 and rows[1].top == "host.python"
    )
    found = store.load(first, path=db)
    assert found is not None and found[1]["steps"]["median_ms"] == 13.0 and found[2] == (4, 5)
    assert store.load(999, path=db) is None


def _writer(args: tuple[str, int]) -> None:
    db, worker = args
    for i in range(10):
        report = {"run": {"started_at": f"t{i}", "command": ["w", str(worker)]}, "findings": []}
        store.record(Path(f"/runs/w{worker}"), report, list(range(i)), path=Path(db))


def test_concurrent_runs_do_not_corrupt_the_history(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    with multiprocessing.get_context("fork").Pool(8) as pool:
        pool.map(_writer, [(str(db), w) for w in range(8)])
    assert len(store.list_runs(limit=1000, path=db)) == 80
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_stalls_every_few_steps_are_compared_by_the_mean_step() -> None:
    """One step in eight 150 ms against 8 ms steps (an epoch-end collection): the medians hardly
    differ, the mean steps ×3.4; removing the stalls is measured by the means, and said so."""
    stalling = [150_000_000 if i % 8 == 7 else 8_000_000 for i in range(64)]
    smooth = [8_200_000] * 64
    t = ratio_test(stalling, smooth)
    assert t.statistic == "mean" and t.significant and 3.0 < t.ratio < 3.8
    plain = ratio_test(_steps(20.0, seed=1), _steps(10.0, seed=2))
    assert plain.statistic == "median"


def _with_run(report: Any, rollouts_s: float) -> Any:
    """`report` over a run of 100 training steps of 20 ms (2 s) and `rollouts_s` of rollouts, with 3 s of
    start-up and 1 s of pinchpoint's own work (left out of the comparison)."""
    wall = 6.0 + rollouts_s
    segments = tuple(
        Segment(name=name, s=s, share=s / wall, steps=steps)
        for name, s, steps in [("start-up", 3.0, 0), ("training steps", 2.0, 100),
                               ("evaluation and rollouts", rollouts_s, 0), ("pinchpoint's own work", 1.0, 0)]
    )  # fmt: skip
    return replace(report, run_time=replace(report.run_time, wall_s=wall, segments=segments))


def test_a_fix_outside_the_steps_shows_in_the_whole_run() -> None:
    """Vectorised rollouts leave the optimizer steps as they were and halve the run: the steps' test
    finds no change, the whole run per training step says ×2."""
    same = _report([], {"host_other": 1.0}, 20.0)
    d = diff_runs(
        RunSide(label="a", report=_with_run(same, 6.0), step_ns=tuple(_steps(20.0, seed=1))),
        RunSide(label="b", report=_with_run(same, 2.0), step_ns=tuple(_steps(20.0, seed=2))),
    )
    assert not d.test.significant
    assert d.run_ms == pytest.approx((80.0, 40.0))
    assert any("×2.00 faster" in line and "whole run" in line for line in verdict(d))
    assert build_diff(d).to_dict()["run_ms_per_step"] == {"before": 80.0, "after": 40.0}
    # steps that are (almost) the whole run: nothing more to say than the steps' test
    d = diff_runs(
        RunSide(label="a", report=_with_run(same, 0.1), step_ns=tuple(_steps(20.0, seed=1))),
        RunSide(label="b", report=_with_run(same, 0.1), step_ns=tuple(_steps(20.0, seed=2))),
    )
    assert d.run_ms is None
