"""run.stalled: ranks that stopped making steps while waiting in a collective name the rank that held
them (the end-to-end case, a hung all-reduce under torchrun, is in test_cli_run.py)."""

from __future__ import annotations

from dataclasses import replace

from conftest import make_env, make_rank_analysis, make_run_analysis, make_steps
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.analysis.run_time import RunTime, Segment, SegmentCode
from pinchpoint.analysis.stacks import HotFunction, StackScope
from pinchpoint.analysis.stopped import Stopped, stopped
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Category, Finding
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import Interval, Phase, RankData, RunMeta, Step, StepKind
from pinchpoint.trace.stacks import Frame


def _rank(
    rank: int,
    tail_s: float,
    *,
    collective: str | None,
    code: str = "main (train.py:40)",
    sampled: bool = False,
) -> RankAnalysis:
    """A rank that made 8 steps, then `tail_s` to the run's end in an unfinished step: waiting in
    `collective` (recorded by its step, or only `sampled` in it), or in its own code."""
    hot = HotFunction(
        frame=Frame(function=code.split()[0], file="/p/train.py", line=40), label=code, share=0.9
    )
    samples = SegmentCode(
        scope=StackScope(name="stopped", samples=400, seconds=tail_s, top=(hot,)),
        cpu_frac=0.05,
        collective=collective if sampled else None,
        collective_frac=0.95 if collective and sampled else 0.0,
    )
    stop = Stopped(
        steps=8,
        ns=int(tail_s * 1e9),
        collective=collective if not sampled else None,
        collective_ns=int(tail_s * 1e9) if collective and not sampled else 0,
        code=samples,
    )
    whole = RunTime(
        wall_ns=int((3 + tail_s) * 1e9),
        segments=(
            Segment(name="start-up", ns=2_000_000_000),
            Segment(name="training steps", ns=1_000_000_000, count=8),
            Segment(name="stalled", ns=int(tail_s * 1e9), count=1, code=samples),
        ),
    )
    return make_rank_analysis({"forward": 40, "backward": 50}, 10, rank=rank, run_time=whole, stopped=stop)


def _stalled(*ranks: RankAnalysis) -> list[Finding]:
    found = diagnose(make_run_analysis(make_env(cores=2), list(ranks))).findings
    return [f for f in found if f.id is Category.RUN_STALLED]


def test_the_rank_outside_the_collective_is_the_one_named() -> None:
    (f,) = _stalled(
        _rank(0, 60, collective="all_reduce"), _rank(1, 60, collective=None, code="read (data.py:9)")
    )
    assert say(f.title) == "The run stopped making steps: the other ranks wait in a collective for rank 1"
    assert f.ranks == (0, 1) and f.estimated_speedup == 1.0
    rank0, rank1 = (dict(x.values) for x in f.evidence)
    assert (rank0["rank"], rank0["waits"], rank0["collective"]) == (0, True, "all_reduce")
    assert (rank1["rank"], rank1["waits"], rank1["code"]) == (1, False, "read (data.py:9)")


def test_it_leads_the_report() -> None:
    found = diagnose(make_run_analysis(make_env(cores=2), [
        _rank(0, 60, collective="all_reduce"), _rank(1, 60, collective=None)
    ])).findings  # fmt: skip
    assert found[0].id is Category.RUN_STALLED


def test_every_rank_waiting_says_the_calls_differ() -> None:
    (f,) = _stalled(_rank(0, 60, collective="all_reduce"), _rank(1, 60, collective="barrier"))
    assert "different calls" in say(f.title) and "same collectives in the same order" in say(f.fix)


def test_a_wait_seen_only_in_the_samples_counts() -> None:
    # (a rank killed inside the collective never recorded it: its main thread was sampled there)
    (f,) = _stalled(_rank(0, 60, collective="barrier", sampled=True), _rank(1, 60, collective=None))
    assert dict(f.evidence[0].values)["collective"] == "barrier"


def test_a_long_stop_outside_any_collective_is_no_stall() -> None:
    # one process that stopped making steps in its own code: a final evaluation or save, not a hang
    assert _stalled(_rank(0, 60, collective=None)) == []


def test_a_rank_that_ended_early_is_the_one_waited_for() -> None:
    (f,) = _stalled(
        _rank(0, 60, collective="all_reduce"), replace(_rank(1, 60, collective=None), stopped=None)
    )
    assert "for rank 1" in say(f.title) and f.ranks == (0,)


def test_the_stop_is_read_from_the_unfinished_step() -> None:
    steps = list(make_steps(8, {"forward": 40, "backward": 50}, 10))
    hung = Step(index=8, kind=StepKind.TRAIN, start_ns=steps[-1].end_ns, end_ns=steps[-1].end_ns + 30 * 10**9, partial=True,
                intervals=(Interval(phase=Phase.COMM, start_ns=steps[-1].end_ns + 10**6,
                                    end_ns=steps[-1].end_ns + 30 * 10**9, what="all_reduce", nbytes=2048),))  # fmt: skip
    meta = RunMeta(command=("x",), started_at="", monotonic_ns=1, ended_ns=hung.end_ns + 10**9, cwd="/p")
    stop = stopped(meta, RankData(rank=0, steps=(*steps, hung)))
    assert stop is not None and (stop.steps, stop.collective) == (8, "all_reduce")
    assert stop.ns == 31 * 10**9
    # under the stall's length (20 median steps, 10 s at least): the run's end, not a stop
    short = RunMeta(command=("x",), started_at="", monotonic_ns=1, ended_ns=steps[-1].end_ns + 5 * 10**9)
    assert stopped(short, RankData(rank=0, steps=tuple(steps))) is None


def test_a_stalled_run_leads_when_the_machine_was_loaded_too() -> None:
    """A loaded run's findings are ordered by their gain without the load; the stalled run's finding
    still comes first (CI caught comm.exposed leading a hung run read as loaded)."""
    from pinchpoint.analysis.cpu_waits import CpuWaits
    from pinchpoint.diagnosis.finding import Basis, Confidence, Fact
    from pinchpoint.diagnosis.unloaded import without_the_load

    def finding(cat: Category, share: float, speedup: float) -> Finding:
        return Finding(id=cat, title=Fact("rule.title", name=cat.value), share=share, estimated_speedup=speedup,
                       basis=Basis.MODEL, confidence=Confidence.MEDIUM, evidence=(), fix=Fact("rule.title", name="x"),
                       ranks=(0,))  # fmt: skip

    rank = replace(
        make_rank_analysis({"forward": 40, "comm": 60}, 0),
        waits=CpuWaits(step_ns=100_000_000, main_ns=5_000_000, all_ns=8_000_000, foreign_cores=1.0),
    )
    stalled = finding(Category.RUN_STALLED, 0.9, 1.0)
    exposed = finding(Category.COMM_EXPOSED, 0.6, 2.0)
    out = without_the_load((stalled, exposed), (rank,), make_env(cores=2))
    assert [f.id for f in out] == [Category.RUN_STALLED, Category.COMM_EXPOSED]
