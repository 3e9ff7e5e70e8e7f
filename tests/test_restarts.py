"""DataLoader workers started again every epoch (`analysis/restarts.py`, `input.worker_restart`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis, make_steps
from pinchpoint.analysis.restarts import worker_restarts
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import FixKind, facts
from pinchpoint.pipeline.fixes import ways_of
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import LoaderConfig, RankData, Step

EPOCHS, BATCHES = 6, 10


def _loader(serial: int, *, workers: int = 2, persistent: bool = False) -> LoaderConfig:
    return LoaderConfig(
        t_ns=serial, num_workers=workers, pin_memory=False, prefetch_factor=2, persistent_workers=persistent,
        batch_size=64, dataset="ShardDataset", serial=serial, site="train.py:40",
    )  # fmt: skip


def _rank(first_ms: float, *, workers: int = 2, persistent: bool = False) -> RankData:
    """Six epochs of ten 20 ms steps, each epoch's first step `first_ms` long."""
    steps: list[Step] = []
    t = 0
    for epoch in range(EPOCHS):
        for s in make_steps(BATCHES, {"forward": 8, "backward": 12}, start_ns=t):
            s = replace(s, index=len(steps), loader=epoch)
            if s.index % BATCHES == 0:
                s = replace(s, end_ns=s.start_ns + int(first_ms * 1e6))
            steps.append(s)
            t = s.end_ns
    loaders = tuple(_loader(e, workers=workers, persistent=persistent) for e in range(EPOCHS))
    return RankData(rank=0, steps=tuple(steps), loaders=loaders)


def test_each_epochs_first_step_beyond_the_others_is_the_restart_cost() -> None:
    r = worker_restarts(_rank(320.0))
    assert r is not None and (r.iterators, r.workers, r.site) == (EPOCHS, 2, "train.py:40")
    assert (r.first_ns, r.other_ns) == (320_000_000, 20_000_000)
    assert r.saved_ns == (EPOCHS - 1) * 300_000_000  # the first epoch's start stays
    assert r.steps == EPOCHS * BATCHES
    assert r.share == pytest.approx(5 * 300 / (EPOCHS * (9 * 20 + 320)))


@pytest.mark.parametrize(
    "rank", [_rank(320.0, persistent=True), _rank(320.0, workers=0)], ids=["persistent", "no-workers"]
)
def test_no_restarts_where_workers_persist_or_there_are_none(rank: RankData) -> None:
    assert worker_restarts(rank) is None


def test_the_finding_prices_persistent_workers_and_try_applies_them() -> None:
    rank = _rank(320.0)
    analysis = replace(
        make_rank_analysis({"forward": 8, "backward": 12}, steps=rank.steps), restarts=worker_restarts(rank)
    )
    found = diagnose(make_run_analysis(make_env(cores=2), [analysis])).findings
    (f,) = [f for f in found if f.id == "input.worker_restart"]
    share = 5 * 300 / (EPOCHS * (9 * 20 + 320))
    assert f.share == pytest.approx(share) and f.estimated_speedup == pytest.approx(1 / (1 - share))
    assert f.fix_kind is FixKind.PERSISTENT_WORKERS
    said = facts(f)
    assert "persistent_workers=True" in say(f.fix)
    assert "train.py:40" in say(said["input.restart.steps"]) and "320" in say(said["input.restart.first"])
    (way,), _ = ways_of(FixKind.PERSISTENT_WORKERS.value, {})
    assert way.agent == {"loader": {"persistent_workers": True}}
    # a small restart (a 25 ms first step against 20 ms) is no finding
    quiet = _rank(25.0)
    analysis = replace(analysis, restarts=worker_restarts(quiet))
    assert not [f for f in diagnose(make_run_analysis(make_env(cores=2), [analysis])).findings
                if f.id == "input.worker_restart"]  # fmt: skip
