"""imbalance.straggler across the ranks of a data-parallel run (CPU run mode)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_env, make_loader, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import facts
from pinchpoint.diagnosis.rules.ranks import straggler
from pinchpoint.report.phrases import say

ENV = make_env(cores=2)


def _rank(rank: int, **ms: float) -> RankAnalysis:
    """A rank whose steps have these phases (ms); 100 ms steps when they add up to 100."""
    return replace(make_rank_analysis(ms, 0.0, rank=rank), local_ranks=2)


# Rank 1 loads 50 ms a step; rank 0 reaches the all-reduce 50 ms earlier and waits in backward.
FAST = {"data_wait": 2.0, "forward": 15.0, "backward": 80.0, "optimizer": 3.0}
SLOW = {"data_wait": 52.0, "forward": 15.0, "backward": 30.0, "optimizer": 3.0}


def test_the_late_rank_is_named_with_what_makes_it_late() -> None:
    found = straggler(ENV, [_rank(0, **FAST), _rank(1, **SLOW)])
    assert found is not None
    f, causes = found
    assert f.ranks == (1,)
    assert f.share == 0.5  # rank 0 waits 50 ms of its 100
    assert abs(f.estimated_speedup - 100 / 50) < 1e-9  # balanced: 20 ms own + 30 ms backward
    stated = facts(f)
    culprit = stated["imbalance.straggler.culprit"]
    assert (culprit["rank"], culprit["phase"], culprit["extra_ns"]) == (1, "data_wait", pytest.approx(50e6))
    assert dict(stated["imbalance.straggler.title"].values) == {"ranks": (1,), "phase": "data_wait"}
    wait = stated["imbalance.straggler.wait"]
    assert wait["wait_ns"] == pytest.approx(50e6) and wait["share"] == pytest.approx(0.5)
    assert stated["imbalance.straggler.balanced"]["balanced_ns"] == pytest.approx(50e6)
    assert [c.value for c in causes] == ["input.fetch", "input.preprocess"]


def test_the_cause_found_on_the_late_rank_is_folded_into_one_finding() -> None:
    slow = replace(_rank(1, **SLOW), loader=make_loader(wall_ms=50.0, cpu_fraction=0.05, num_workers=0))
    report = diagnose(make_run_analysis(ENV, [_rank(0, **FAST), slow]))
    ids = [f.id.value for f in report.findings]
    assert ids[0] == "imbalance.straggler" and "input.fetch" not in ids, ids
    top = report.findings[0]
    stated = facts(top)
    assert stated["merge.on_ranks"]["ranks"] == (1,) and "num_workers=" in say(top.fix)
    why = stated["merge.why_late"]
    assert why["ranks"] == (1,) and why["category"] == "input.fetch"


def test_balanced_ranks_have_no_straggler() -> None:
    assert straggler(ENV, [_rank(0, **FAST), _rank(1, **FAST)]) is None


def test_a_slow_rank_nobody_waits_for_is_not_a_straggler() -> None:
    # Rank 1 does more of its own work, but rank 0's backward shows no wait: not held back.
    assert straggler(ENV, [_rank(0, **SLOW), _rank(1, **{**SLOW, "data_wait": 70.0})]) is None


def test_gap_below_ten_percent_of_the_step_is_noise() -> None:
    fast = {**FAST, "backward": 71.0}
    slow = {**FAST, "data_wait": 11.0, "backward": 62.0}  # 9 ms behind, rank 0 waits 9 ms
    assert straggler(ENV, [_rank(0, **fast), _rank(1, **slow)]) is None


def test_every_late_rank_is_named() -> None:
    found = straggler(ENV, [_rank(0, **FAST), _rank(1, **SLOW), _rank(2, **SLOW), _rank(3, **FAST)])
    assert found is not None and found[0].ranks == (1, 2)
    assert facts(found[0])["imbalance.straggler.fix"]["ranks"] == (1, 2)


def test_one_rank_has_no_straggler() -> None:
    assert straggler(ENV, [_rank(0, **SLOW)]) is None
