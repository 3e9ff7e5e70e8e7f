"""Python's garbage collector: counted in the process (`capture/gc_watch.py`), read back, judged."""

from __future__ import annotations

import gc
import json
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.gc import gc_stats
from pinchpoint.capture.gc_watch import GcWatch
from pinchpoint.capture.patches import Patches
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Category, FixKind, facts
from pinchpoint.ingest.gc_file import gc_record
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import Step, StepKind
from pinchpoint.trace.trials import GcRecord, GcSite

MS = 1_000_000


def test_collections_and_the_lines_that_call_collect_are_counted_then_put_back(tmp_path: Path) -> None:
    patches, watch, original = Patches(), GcWatch(), gc.collect
    watch.install(patches)
    try:
        junk = [[i] for i in range(50_000)]  # containers: the first generation fills and collects
        for generation in (2, 0):
            gc.collect(generation)
        del junk
    finally:
        patches.undo()
    assert gc.collect is original and watch.callback not in gc.callbacks
    assert watch.collections >= 2 and watch.full >= 1 and watch.ns > 0
    assert watch.explicit_ns > 0 and watch.explicit_ns <= watch.ns
    (site,) = watch.explicit
    assert site[0] == __file__ and site[2].startswith("test_collections") and watch.explicit[site][0] == 2
    gc.collect()  # after undo: not counted
    assert watch.explicit[site][0] == 2
    watch.write(tmp_path)
    record = gc_record(json.loads((tmp_path / "gc.json").read_text()))
    assert record is not None and record.explicit[0].calls == 2 and record.explicit[0].file == __file__
    assert record.threshold == gc.get_threshold()


@pytest.mark.parametrize("doc", [None, [], {"explicit": [{"file": 3}, "x"], "ns": "a"}, {"frozen": -4}])
def test_a_broken_gc_file_reads_as_little_as_it_holds(doc: object) -> None:
    record = gc_record(doc)
    assert record is None or (record.explicit == () and record.ns == 0 and record.frozen == 0)


def _steps(n: int, every: int, stall_ms: float) -> list[Step]:
    out, t = [], 0
    for i in range(n):
        stall = (i % every == every - 1) * stall_ms
        dur = round((5 + stall) * MS)
        gc_ns = round((0.1 + stall) * MS)
        out.append(Step(index=i, kind=StepKind.TRAIN, start_ns=t, end_ns=t + dur, gc_ns=gc_ns, gc_collections=1,
                        gc_full=int(bool(stall)), gc_explicit_ns=round(stall * MS)))  # fmt: skip
        t += dur
    return out


def test_an_epoch_end_collect_is_a_periodic_stall_named_by_its_line() -> None:
    site = GcSite(
        file="/usr/lib/python3/site-packages/kglib/train.py",
        line=212,
        function="fit",
        calls=10,
        ns=1_500 * MS,
    )
    stats = gc_stats(
        _steps(80, 8, 150), GcRecord(ns=0, collections=0, full=0, explicit_ns=0, explicit=(site,)), "/home/me"
    )
    assert stats is not None and stats.stall_steps == 10 and stats.stall_every == 8
    assert stats.stall_ns == 150 * MS + MS // 10 and stats.explicit_share == pytest.approx(
        1500 / (400 + 1500)
    )
    analysis = replace(make_rank_analysis({"forward": 4}, 1), gc=stats)
    found = diagnose(make_run_analysis(make_env(cores=2), [analysis])).findings
    (f,) = [f for f in found if f.id is Category.HOST_GC]
    assert f.fix_kind is FixKind.GC_LESS and f.fix_params == (("line", 212),)
    assert f.estimated_speedup == pytest.approx(1 / (1 - stats.explicit_share))
    line = say(facts(f)["host.gc.site"])
    assert "train.py:212 in fit()" in line and "a library's code" in line
    assert "one every 8 steps" in say(facts(f)["host.gc.stalls"])
    assert "(it is a library's" in say(f.fix)


def test_no_finding_for_a_collector_that_costs_little_or_was_not_counted() -> None:
    quiet = [replace(s, gc_ns=10_000, gc_explicit_ns=0) for s in _steps(40, 8, 0)]
    stats = gc_stats(quiet, None)
    assert stats is not None and stats.share < 0.01
    analysis = replace(make_rank_analysis({"forward": 4}, 1), gc=stats)
    assert not [
        f for f in diagnose(make_run_analysis(make_env(), [analysis])).findings if f.id is Category.HOST_GC
    ]
    assert gc_stats([replace(s, gc_ns=None) for s in quiet], None) is None
