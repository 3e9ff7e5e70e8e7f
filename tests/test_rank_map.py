"""Many-rank analysis as a per-rank map and a cross-rank reduce: in this process, on a local process
pool, and on a real Dask cluster (a LocalCluster started here) — the same report on every path."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pinchpoint.analysis.gpu.trace_analysis import analyze_traces
from pinchpoint.diagnosis.engine import diagnose_gpu
from pinchpoint.errors import TraceError, UsageError
from pinchpoint.ingest.kineto import read_trace_dir
from pinchpoint.pipeline.ranks import RENUMBERED, analyze_file, map_ranks
from pinchpoint.pipeline.traces import report_traces
from pinchpoint.report.gpu_report import build_gpu_report

DATA = Path(__file__).parent / "data" / "traces"
TWO_RANKS = DATA / "hta" / "trace_filter"


def _rank_copies(tmp: Path, n: int, *, drop_rank: bool = False) -> Path:
    """`n` ranks made from the two real ranks of trace_filter (rank r is a copy of rank r % 2)."""
    out = tmp / f"ranks{n}"
    out.mkdir()
    for r in range(n):
        doc = json.loads(gzip.decompress((TWO_RANKS / f"sampled_rank-{r % 2}.json.gz").read_bytes()))
        if drop_rank:
            doc.pop("distributedInfo", None)
        else:
            doc.setdefault("distributedInfo", {})["rank"] = r
            doc["distributedInfo"]["world_size"] = n
        (out / f"rank-{r:02d}.json").write_text(json.dumps(doc))
    return out


@pytest.fixture(scope="module")
def dask_cluster() -> Iterator[str]:
    distributed = pytest.importorskip("dask.distributed")
    # LocalCluster writes its workers' settings into this process's environment and leaves them there
    # (OMP_NUM_THREADS=1, MALLOC_TRIM_THRESHOLD_=65536, ...): every program a later test starts would
    # run on one thread with glibc trimming its heap (pinchpoint duly reported cpu.underuse and
    # allocator churn on them in a fresh-clone CI run).
    saved = dict(os.environ)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()
        os.environ.clear()
        os.environ.update(saved)


def test_every_path_gives_the_same_report(tmp_path: Path, dask_cluster: str) -> None:
    ranks = _rank_copies(tmp_path, 4)
    here = report_traces(ranks, workers=1).to_dict()
    pool = report_traces(ranks, workers=2).to_dict()
    dask = report_traces(ranks, cluster=dask_cluster).to_dict()
    assert json.dumps(here, sort_keys=True) == json.dumps(pool, sort_keys=True)
    assert json.dumps(here, sort_keys=True) == json.dumps(dask, sort_keys=True)
    assert [g["rank"] for g in here["gpu"]] == [0, 1, 2, 3]
    # ... and the same as analysing all traces in one process at once (the old path).
    whole = analyze_traces(read_trace_dir(ranks))
    assert json.dumps(build_gpu_report(whole, diagnose_gpu(whole), str(ranks)).to_dict(), sort_keys=True) == json.dumps(
        here, sort_keys=True
    )


def test_ranks_without_numbers_are_numbered_in_file_order_on_every_path(tmp_path: Path) -> None:
    ranks = _rank_copies(tmp_path, 3, drop_rank=True)
    pool = map_ranks(ranks, workers=2)
    assert [r.rank for r in pool] == [0, 1, 2] and all(RENUMBERED in r.warnings for r in pool)
    assert [r.collectives.rank for r in pool] == [0, 1, 2]
    old = analyze_traces(read_trace_dir(ranks))
    assert [r.warnings for r in old.ranks] == [r.warnings for r in pool]


def test_an_unreadable_rank_is_skipped_with_a_warning(tmp_path: Path) -> None:
    ranks = _rank_copies(tmp_path, 2)
    (ranks / "rank-99.json").write_text('{"traceEvents": [')
    found = map_ranks(ranks, workers=2)
    assert [r.rank for r in found] == [0, 1]
    assert any(w.startswith("skipped an unreadable trace") for w in found[0].warnings)
    shutil.rmtree(ranks)
    ranks.mkdir()
    (ranks / "bad.json").write_text("not json")
    with pytest.raises(TraceError):
        map_ranks(ranks, workers=2)


def test_a_rank_result_is_small_beside_its_trace() -> None:
    f = DATA / "kineto_tb_plugin" / "resnet50_num_workers_0" / "worker0.1623143089861.pt.trace.json.gz"
    result = analyze_file(str(f))
    assert not isinstance(result, str)
    assert len(pickle.dumps(result)) * 100 < result.meta.trace_bytes


def test_no_scheduler_at_the_address_is_a_clear_error(tmp_path: Path) -> None:
    ranks = _rank_copies(tmp_path, 2)
    with pytest.raises(UsageError, match="no Dask scheduler"):
        report_traces(ranks, cluster="tcp://127.0.0.1:9")
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "analyze", str(ranks), "--cluster", "tcp://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
