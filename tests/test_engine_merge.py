"""How the engine reconciles findings of one run: the compute-bound summary nets out per-op overhead
found inside the same phases, and input rules say nothing when the program never waits for data."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.steps import StepStats
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.merge import net_compute_summary, sort_key
from pinchpoint.diagnosis.notes import nothing_to_judge
from pinchpoint.diagnosis.registry import RULES
from pinchpoint.diagnosis.rules.base import Scope
from pinchpoint.trace.run import StepKind


def finding(cat: Category, share: float, speedup: float) -> Finding:
    return Finding(
        id=cat,
        title=cat.value,
        share=share,
        estimated_speedup=speedup,
        basis=Basis.MODEL,
        confidence=Confidence.MEDIUM,
        evidence=("measured",),
        fix="fix",
    )


def test_compute_summary_nets_out_dispatch_overhead() -> None:
    by_id = {
        Category.COMPUTE_MATH: finding(Category.COMPUTE_MATH, 0.95, 1.0),  # the informational summary
        Category.HOST_DISPATCH: finding(Category.HOST_DISPATCH, 0.74, 2.7),
    }
    net_compute_summary(by_id)
    assert by_id[Category.COMPUTE_MATH].share == 0.95 - 0.74
    net = by_id[Category.COMPUTE_MATH].evidence[-1]
    assert isinstance(net, Fact) and net.key == "merge.compute_net"
    assert net["parts"] == (("host.dispatch", 0.74),) and net["share"] == pytest.approx(0.21)
    assert sum(f.share for f in by_id.values()) <= 1.0


def test_a_precision_finding_is_left_alone() -> None:
    # fp32 on AMX is a fix with a gain, not the summary: its share is the fp32 matmul time.
    by_id = {
        Category.COMPUTE_MATH: finding(Category.COMPUTE_MATH, 0.60, 2.5),
        Category.HOST_DISPATCH: finding(Category.HOST_DISPATCH, 0.20, 1.2),
    }
    net_compute_summary(by_id)
    assert by_id[Category.COMPUTE_MATH].share == 0.60


def test_a_finding_with_no_share_ranks_after_every_finding_with_one() -> None:
    # Issue 31: an fp32 MLP listed memory.leak (no share, x1.0) above its 99% compute summary (x1.0).
    leak = finding(Category.MEMORY_LEAK, 0.0, 1.0)
    summary = finding(Category.COMPUTE_MATH, 0.99, 1.0)
    python = finding(Category.HOST_PYTHON, 0.10, 1.1)
    assert sorted([leak, summary], key=sort_key) == [summary, leak]
    assert sorted([summary, leak], key=sort_key) == [summary, leak]
    # otherwise as before: the biggest gain first, the informational summary after problems
    assert sorted([leak, summary, python], key=sort_key) == [python, summary, leak]


def _rank(data_wait: float) -> RankAnalysis:
    steps = StepStats(
        kind=StepKind.TRAIN,
        total_steps=20,
        count=15,
        median_ns=10**7,
        p90_ns=10**7,
        mean_ns=1e7,
        breakdown={"data_wait": data_wait, "forward": 1 - data_wait},
    )
    return RankAnalysis(rank=0, steps=steps, loader=None, cpu=None, ops=None, memory=None, main=None)


def test_input_rules_are_silent_when_nothing_waits_for_data() -> None:
    recorded = [r for r in RULES if r.scope is Scope.RANK]
    inputs = [r for r in recorded if r.id in (Category.INPUT_FETCH, Category.INPUT_PREPROCESS)]
    assert inputs
    for rule in inputs:
        assert nothing_to_judge(rule, _rank(0.0))
        assert not nothing_to_judge(rule, _rank(0.2))  # waits, but unrecorded loaders: say so
    others = [r for r in recorded if r.id not in (Category.INPUT_FETCH, Category.INPUT_PREPROCESS)]
    served = [r for r in others if "serving" in r.requires]  # (a server's rules: nothing on other runs)
    assert served and all(nothing_to_judge(r, _rank(0.0)) for r in served)
    assert not any(nothing_to_judge(r, _rank(0.0)) for r in others if r not in served)


def _steady(phase_ms: dict[str, float], host_other_ms: float) -> RankAnalysis:
    from conftest import make_rank_analysis

    return make_rank_analysis(phase_ms, host_other_ms)


def test_a_share_is_capped_at_the_phases_it_lives_in_and_its_estimate_with_it() -> None:
    """The op window (on a loaded machine) put fp32 matmuls at 60% of its step; the steady steps spend
    11% in forward+backward+optimizer. The finding is counted at 11%, and its estimate can no longer
    save more than that; a trial's measured speedup is left as measured."""
    from pinchpoint.diagnosis.shares import bound_shares

    rank = _steady({"data_wait": 15, "forward": 5, "backward": 5, "optimizer": 1}, 74)  # a 100 ms step
    by_id = {
        Category.COMPUTE_MATH: finding(Category.COMPUTE_MATH, 0.60, 2.0),
        Category.INPUT_FETCH: finding(Category.INPUT_FETCH, 0.15, 1.17),
        Category.CPU_OVERSUBSCRIPTION: replace(
            finding(Category.CPU_OVERSUBSCRIPTION, 0.6, 2.5), basis=Basis.TRIAL
        ),
    }
    bound_shares(by_id, [rank])
    math_ = by_id[Category.COMPUTE_MATH]
    assert math_.share == pytest.approx(0.11)
    assert math_.estimated_speedup == pytest.approx(1 / 0.89)
    bounded = math_.evidence[-1]
    assert isinstance(bounded, Fact) and bounded.key == "merge.share_bounded"
    assert bounded["claimed"] == 0.60 and bounded["phases"] == ("forward", "backward", "optimizer")
    assert by_id[Category.INPUT_FETCH].share == 0.15 and by_id[Category.INPUT_FETCH].estimated_speedup == 1.17
    assert by_id[Category.CPU_OVERSUBSCRIPTION].estimated_speedup == 2.5  # measured: stands


def test_causes_that_share_phases_are_capped_together_the_compute_summary_first() -> None:
    """Per-op overhead (70%) and Python outside every phase (40%) cannot both hold in a step whose
    compute and other host time are 80%: the compute summary goes first, then per-op overhead, whose
    share was read from the op window; Python's, read from the steps, stands."""
    from pinchpoint.diagnosis.shares import bound_shares

    rank = _steady({"data_wait": 20, "forward": 20, "backward": 20}, 40)
    by_id = {
        Category.COMPUTE_MATH: finding(Category.COMPUTE_MATH, 0.05, 1.0),
        Category.HOST_DISPATCH: finding(Category.HOST_DISPATCH, 0.70, 2.5),
        Category.HOST_PYTHON: finding(Category.HOST_PYTHON, 0.40, 1.6),
    }
    bound_shares(by_id, [rank])
    assert by_id[Category.COMPUTE_MATH].share == 0.0
    assert by_id[Category.HOST_DISPATCH].share == pytest.approx(0.40)
    assert by_id[Category.HOST_PYTHON].share == 0.40
    assert by_id[Category.HOST_DISPATCH].estimated_speedup == pytest.approx(1 / 0.6)


def test_findings_measured_beside_busy_neighbours_lose_confidence_but_a_trial_does_not() -> None:
    from conftest import make_cpu, make_rank_analysis
    from pinchpoint.diagnosis.merge import on_a_shared_machine

    found = (
        finding(Category.INPUT_FETCH, 0.3, 1.4),
        replace(finding(Category.CPU_OVERSUBSCRIPTION, 0.5, 2.0), basis=Basis.TRIAL),
    )
    busy = make_rank_analysis({"forward": 50}, cpu=make_cpu(process_cores=1.0, machine_busy_cores=2.0))
    shared = on_a_shared_machine(found, (busy,))
    assert shared[0].confidence is Confidence.LOW
    why = shared[0].evidence[-1]
    assert isinstance(why, Fact) and why.key == "merge.contended" and why["foreign_cores"] == 1.0
    assert shared[1] == found[1]
    alone = make_rank_analysis({"forward": 50}, cpu=make_cpu(process_cores=1.0, machine_busy_cores=1.3))
    assert on_a_shared_machine(found, (alone,)) == found
