"""Short steps share one reading of the kernel's counters (`capture/shared_counters.py`)."""

from __future__ import annotations

from typing import Any

from pinchpoint.capture.shared_counters import FIELDS, MAX_STEPS, SHARE_NS, SharedCounters
from pinchpoint.capture.step_state import Counters


def _line(start: int, end: int, **counters: Any) -> dict[str, Any]:
    zero = {"cpu_ns": 0, **{f: 0 for f in FIELDS}}
    return {"start_ns": start, "end_ns": end, **zero, **counters}


def _counters(cpu: int, runq: int | None, faults: int, sys: int, main: int | None) -> Counters:
    return Counters(cpu, None if runq is None else (cpu, runq), faults, sys, main)


def test_a_run_of_short_steps_shares_its_change_and_keeps_the_sums() -> None:
    shared = SharedCounters()
    start = _counters(0, 0, 0, 0, 0)
    shared.hold(_line(0, 100, cpu_ns=50), start)  # its own CPU time is read at every boundary
    shared.hold(_line(100, 400, cpu_ns=50), start)
    last = _line(400, 1000, cpu_ns=400, runq_ns=10, minor_faults=1000, sys_ns=5, main_sys_ns=None)
    run = shared.release(last)
    assert [r["cpu_ns"] for r in run] == [50, 50, 400]  # exact, untouched
    assert [r["minor_faults"] for r in run] == [100, 100, 800]  # faults by CPU time
    assert [r["runq_ns"] for r in run] == [1, 3, 6]  # waits for a CPU by wall time
    assert sum(r["sys_ns"] for r in run) == 5
    assert [r["main_sys_ns"] for r in run] == [None] * 3  # not read: not made up
    assert [r["shared"] for r in run] == [3, 3, 3] and not shared.held
    alone = _line(1000, 2000, cpu_ns=5)
    assert shared.release(alone) == [alone] and "shared" not in alone  # a step of its own


def test_a_run_ended_by_pinchpoints_own_work_takes_only_its_wall_times_part() -> None:
    shared = SharedCounters()
    shared.hold(_line(0, 500, cpu_ns=250), _counters(100, 0, 10, 0, 0))
    shared.hold(_line(500, 1000, cpu_ns=250), _counters(100, 0, 10, 0, 0))
    run = shared.release_now(_counters(2100, 40, 30, 0, 8), end_ns=2000)  # read 1000 ns after the run
    assert [r["cpu_ns"] for r in run] == [250, 250] and [r["minor_faults"] for r in run] == [5, 5]
    assert [r["runq_ns"] for r in run] == [10, 10] and not shared.held
    assert shared.release_now(_counters(0, 0, 0, 0, 0), 0) == []


def test_only_short_steps_join_a_run_and_a_run_has_bounds() -> None:
    shared = SharedCounters()
    assert not shared.may_hold(0, SHARE_NS)  # a step as long as a run: alone
    assert shared.may_hold(0, SHARE_NS - 1)
    start = _counters(0, 0, 0, 0, 0)
    shared.hold(_line(0, SHARE_NS // 2), start)
    assert not shared.may_hold(SHARE_NS // 2, SHARE_NS + 1)  # the run would pass SHARE_NS
    shared.release(_line(SHARE_NS // 2, SHARE_NS - 1))
    for i in range(MAX_STEPS):
        shared.hold(_line(i, i + 1), start)
    assert not shared.may_hold(MAX_STEPS, MAX_STEPS + 1)
