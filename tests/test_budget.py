"""pinchpoint's budget inside the program's loop (issue 33, `capture/budget.py`): its own steps' excess
over the program's typical step and its time between steps are counted against 0.25 s + 1% of the loop;
once past it the op window ends and a trial whose steps lose stops."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.memory import PageFaults
from pinchpoint.capture.budget import FIXED_NS, LoopBudget
from pinchpoint.capture.thread_trial import FILE, STEPS, WARM, fitting_threads
from pinchpoint.capture.trials import CUT_FILE, SPANS, Trials
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Basis
from pinchpoint.ingest.trials import trial_cut
from pinchpoint.report.phrases import say
from pinchpoint.trace.trials import TrialCut

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[1]
MS = 1_000_000


def _record(step: int, dur_ms: float, *, trial: bool = False, profiled: bool = False) -> dict[str, object]:
    start = step * 10_000 * MS
    return {
        "step": step, "start_ns": start, "end_ns": start + int(dur_ms * MS), "profiled": profiled,
        "trial": trial, "partial": False, "minor_faults": 0, "intervals": [],
    }  # fmt: skip


def test_the_budget_counts_only_pinchpoints_steps_past_the_typical_one() -> None:
    budget = LoopBudget()
    assert budget.observe(_record(0, 500, profiled=True)) is None  # no typical step yet: not counted
    for i in range(1, 6):
        assert budget.observe(_record(i, 100)) is None
    assert budget.typical_ns == 100 * MS
    assert budget.observe(_record(6, 130, profiled=True)) == 30 * MS
    assert budget.observe(_record(7, 80, trial=True)) == -20 * MS  # a trial that gains costs nothing
    assert budget.spent_ns == 30 * MS
    assert budget.loop_ns == (500 + 5 * 100 + 130 + 80) * MS
    assert budget.allowance_ns() == FIXED_NS + budget.loop_ns // 100
    assert not budget.over()
    budget.note(300 * MS)  # the window's probes, between two steps
    assert budget.over()
    assert budget.losing([50 * MS, 70 * MS]) == pytest.approx(1.6)
    assert budget.losing([20 * MS]) is None  # one step 20% slow: not yet a verdict
    assert budget.losing([20 * MS, 10 * MS]) == pytest.approx(1.15)
    assert budget.losing([60 * MS]) == pytest.approx(1.6)  # one step, clearly slower
    assert budget.losing([2 * MS, 3 * MS]) is None  # within noise of the typical step
    assert budget.losing([-20 * MS]) is None and budget.losing([]) is None


@pytest.fixture
def threads() -> object:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _drive(trials: Trials, first: int, last: int, own_ms: float, trial_ms: float) -> list[bool]:
    """Steps `first`..`last` end, each taking `own_ms` at the program's settings and `trial_ms` as a
    trial step; returns which were trial steps."""
    marks = []
    trial = False
    for step in range(first, last + 1):
        trials.observe(_record(step, trial_ms if trial else own_ms, trial=trial))
        trial = trials.on_step_end(torch, step + 1, ready=True)
        marks.append(trial)
    return marks


def test_a_losing_thread_trial_stops_at_the_budget_and_keeps_what_it_measured(
    tmp_path: Path, threads: object
) -> None:
    fit = fitting_threads()
    torch.set_num_threads(fit * 4)
    trials = Trials(tmp_path)
    marks = _drive(trials, 0, 30, 100.0, 250.0)  # one thread per core runs each step 2.5 times as long
    assert torch.get_num_threads() == fit * 4  # set back
    record = json.loads((tmp_path / FILE).read_text())
    # It began at step 1; past its warm-up (300 ms over, the allowance 256 ms) the first measured step
    # lost, and it stopped there.
    assert record["stopped"] == "budget" and record["steps"] == [1 + WARM]
    assert sum(marks) == WARM + 2  # its warm-up, the measured step, the step back; not WARM + STEPS + 1
    assert not (tmp_path / CUT_FILE).exists()  # its measured steps stand: no cut to say


def test_a_gaining_trial_runs_its_course_even_past_the_budget(tmp_path: Path, threads: object) -> None:
    fit = fitting_threads()
    torch.set_num_threads(fit * 4)
    trials = Trials(tmp_path)
    for i in range(5):
        trials.observe(_record(i, 100))
    trials.budget.note(FIXED_NS + 50 * MS)  # spent before the trial (a slow window's probes)
    assert trials.budget.over()
    marks = _drive(trials, 5, 40, 100.0, 60.0)  # it starts (a likely gain) and runs its course
    assert sum(marks) == WARM + STEPS + 1
    record = json.loads((tmp_path / FILE).read_text())
    assert "stopped" not in record and len(record["steps"]) == STEPS


def test_another_trial_stopped_by_the_budget_says_so_and_its_finding_is_a_model(tmp_path: Path) -> None:
    trials = Trials(tmp_path)
    for i in range(5):
        trials.observe(_record(i, 100))
    trials.alloc.state, trials.alloc.first = "running", 5  # (no glibc handle: nothing to set back)
    for i in range(5, 9):
        trials.observe(_record(i, 300, trial=True))
    assert trials.budget.over()
    assert trials.on_step_end(None, 9, ready=True) is True  # the step after: settings just went back
    assert trials.alloc.state == "done"
    cut = trial_cut(json.loads((tmp_path / CUT_FILE).read_text()))
    assert cut is not None and (cut.trial, cut.reason, cut.steps_done) == ("alloc", "budget", 4)
    assert cut.slowdown == pytest.approx(3.0)
    assert cut.steps_needed == SPANS["alloc"]
    assert trial_cut({"trial": "alloc", "steps_done": 1, "steps_needed": 2, "reason": "budget",
                      "slowdown": "x"}).slowdown is None  # fmt: skip
    assert trial_cut({"trial": "alloc", "steps_done": 1, "steps_needed": 2}).reason == "end"

    pf = PageFaults(steps=20, median_per_step=6_000, median_step_ns=100_000_000, fault_ns=5_000)
    rank = replace(make_rank_analysis({"forward": 40, "backward": 50}, 10, faults=pf), trial_cut=cut)
    (f,) = [
        f
        for f in diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
        if f.id == "memory.pressure"
    ]
    assert f.basis is Basis.REMOVED
    text = say(next(e for e in f.evidence if e.key == "trial.stopped"))
    assert "allocator trial stopped after 4 of its 13 steps" in text and "×3.00" in text and "model" in text
    assert TrialCut(trial="alloc", steps_done=1, steps_needed=2).reason == "end"


def test_the_op_window_ends_early_when_shortened(tmp_path: Path, threads: object) -> None:
    from pinchpoint.capture.opwindow import OpWindow

    window = OpWindow(tmp_path, (2, 3))
    assert window.on_step_end(torch, 2) is True and window.active
    torch.mm(torch.ones(8, 8), torch.ones(8, 8))
    window.shorten(3)
    assert window.on_step_end(torch, 3) is True  # stopped after one step, its probes run
    assert window.done and not window.active
    assert json.loads((tmp_path / "probes.json").read_text())["window_steps"] == 1


SLOWER_WITH_FEWER_THREADS = textwrap.dedent(
    """
    import time, torch
    torch.set_num_threads(8)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(40):
        model(torch.ones(2, 4)).sum().backward()
        time.sleep(0.02 if torch.get_num_threads() >= 8 else 0.16)
        opt.step()
        opt.zero_grad()
    """
)


@pytest.mark.e2e
def test_a_program_whose_trial_loses_gets_its_time_back(tmp_path: Path) -> None:
    """A real run: the thread trial's steps take 8 times as long; pinchpoint stops it once its budget
    is spent, and the finding is not made from a trial that did not pay."""
    script = tmp_path / "fewer_threads.py"
    script.write_text(SLOWER_WITH_FEWER_THREADS)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(out), "--", sys.executable, str(script)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((out / "ranks" / "rank0" / FILE).read_text())
    assert record["stopped"] == "budget" and 1 <= len(record["steps"]) < STEPS
    steps = [json.loads(line) for line in (out / "ranks" / "rank0" / "steps.jsonl").read_text().splitlines()]
    assert sum(1 for s in steps if s["trial"]) < WARM + STEPS + 1
    report = json.loads((out / "report.json").read_text())
    assert "cpu.oversubscription" not in [f["id"] for f in report["findings"]]


def test_a_window_asked_for_is_not_shortened(tmp_path: Path) -> None:
    """`pinchpoint capture --steps N` gets its N steps, whatever pinchpoint spent before."""
    from pinchpoint.capture.opwindow import OpWindow

    window = OpWindow(tmp_path, (2, 3))
    window.asked = True
    window.active = True
    window.shorten(3)
    assert window.spec == (2, 3)
