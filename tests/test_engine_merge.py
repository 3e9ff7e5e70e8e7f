"""How the engine reconciles findings of one run: the compute-bound summary nets out per-op overhead
found inside the same phases, and input rules say nothing when the program never waits for data."""

from __future__ import annotations

import pytest

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.steps import StepStats
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding
from pinchpoint.diagnosis.merge import net_compute_summary
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
    assert not any(nothing_to_judge(r, _rank(0.0)) for r in others)
