"""pipeline.bubble: a pipeline schedule's stages idle in its bubble, priced by more microbatches; the
capture reads the schedule's settings (the end-to-end run is examples/pipeline_bubble.py's)."""

from __future__ import annotations

import json

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.comm import CommActivity
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.capture.dist_hooks import pipeline_settings
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Category, Finding, FixKind, facts
from pinchpoint.ingest.parallel import pipeline_config
from pinchpoint.report.phrases import say
from pinchpoint.trace.parallel import PipelineConfig


def _stage(rank: int, idle_ms: float, cfg: PipelineConfig | None) -> RankAnalysis:
    """A rank whose 100 ms step waits `idle_ms` at the schedule's receives (as comm)."""
    work = 100 - idle_ms
    return make_rank_analysis(
        {"forward": work / 3, "backward": 2 * work / 3, "comm": idle_ms},
        0,
        rank=rank,
        comm=CommActivity(
            per_step_ns={},
            mean_ns=idle_ms * 1e6,
            backward_calls=2,
            synced_backwards=0,
            ddp=None,
            pipeline=cfg,
        ),
    )


def _found(*ranks: RankAnalysis) -> list[Finding]:
    out = diagnose(make_run_analysis(make_env(cores=2), list(ranks))).findings
    return [f for f in out if f.id in (Category.PIPELINE_BUBBLE, Category.COMM_EXPOSED)]


GPIPE_2 = PipelineConfig(schedule="ScheduleGPipe", microbatches=2, stages=2, stage_indices=(0,))


def test_few_microbatches_leave_the_stages_idle_and_more_are_priced() -> None:
    (f,) = _found(_stage(0, 30, GPIPE_2), _stage(1, 25, GPIPE_2))
    assert f.id is Category.PIPELINE_BUBBLE and f.share == pytest.approx(0.30)
    # 4 microbatches: the 30 ms of waiting shrinks to 15 ms (x m/m'), the 70 ms of work stays
    assert f.estimated_speedup == pytest.approx(100 / 85)
    assert f.fix_kind is FixKind.MICROBATCHES and dict(f.fix_params) == {"microbatches": 4}
    assert facts(f)["pipeline.bubble.schedule"]["bound_share"] == pytest.approx(1 / 3)
    assert "n_microbatches=4" in say(f.fix)


def test_a_pipelines_comm_is_not_reported_as_exposed_collectives() -> None:
    assert [f.id for f in _found(_stage(0, 30, GPIPE_2), _stage(1, 25, GPIPE_2))] == [
        Category.PIPELINE_BUBBLE
    ]
    # without the schedule's settings the same waits are comm.exposed, as before
    assert [f.id for f in _found(_stage(0, 30, None), _stage(1, 25, None))] == [Category.COMM_EXPOSED]


def test_many_microbatches_or_little_waiting_is_no_finding() -> None:
    many = PipelineConfig(schedule="Schedule1F1B", microbatches=16, stages=2)
    assert _found(_stage(0, 30, many), _stage(1, 30, many)) == []  # bound 1/17: little to gain
    assert _found(_stage(0, 5, GPIPE_2), _stage(1, 5, GPIPE_2)) == []  # idle 5%


def test_the_schedules_settings_are_read_and_written_back() -> None:
    class Stage:
        stage_index = 1

    class ScheduleGPipe:
        _n_microbatches, _num_stages, _stage = 4, 2, Stage()

    line = pipeline_settings(ScheduleGPipe())
    assert (line["schedule"], line["microbatches"], line["stages"], line["stage_indices"]) == (
        "ScheduleGPipe", 4, 2, [1]
    )  # fmt: skip
    cfg = pipeline_config([json.loads(json.dumps(line))])
    assert cfg == PipelineConfig(schedule="ScheduleGPipe", microbatches=4, stages=2, stage_indices=(1,))
    assert pipeline_config([{"kind": "pipeline", "schedule": "X", "microbatches": 0, "stages": 2}]) is None
