"""Many-rank trace analysis as a per-rank map and a cross-rank reduce.

    map     one trace file -> `GpuRankAnalysis` (read and analyse one rank: ~10-30 kB of results, the
            events are dropped in the worker)
    reduce  `combine_ranks`: match collectives across ranks, find stragglers -> `GpuRunAnalysis`

The map runs in this process (`workers=1`), on a local process pool (`workers=N`), or on an existing
Dask cluster (`cluster="tcp://scheduler:8786"`; decision 20). It is the same function on the same
files, so every path gives the same report. A worker holds one rank's trace at a time, so its memory
is bounded by the largest trace, not by the number of ranks. On a cluster the workers must be able to
read the trace paths (a shared filesystem) and import pinchpoint.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pinchpoint.analysis.gpu.trace_analysis import GpuRankAnalysis, analyze_trace
from pinchpoint.errors import TraceError, UsageError
from pinchpoint.ingest.kineto import RENUMBERED, read_trace, trace_files


def analyze_file(path: str, progress: Callable[[int, int], None] | None = None) -> GpuRankAnalysis | str:
    """The map: one rank's trace, read and analysed; a one-line error instead when it can't be read."""
    try:
        return analyze_trace(read_trace(Path(path), progress=progress))
    except TraceError as exc:
        return str(exc)


def map_ranks(
    path: Path,
    *,
    workers: int = 1,
    cluster: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[GpuRankAnalysis]:
    """Every trace of `path` (a file or a directory of per-rank files), analysed, sorted by rank."""
    files = [path] if path.is_file() else trace_files(path)
    names = [str(f) for f in files]
    sizes = [f.stat().st_size for f in files]
    if cluster is not None:
        results = _on_dask(names, cluster)
    elif workers > 1 and len(names) > 1:
        results = _on_pool(names, sizes, workers, progress)
    else:
        results = [_read_here(f, sum(sizes[:i]), sum(sizes), progress) for i, f in enumerate(files)]
    return _reduce_errors(path, results) if path.is_dir() else _single(path, results)


def _read_here(
    f: Path, base: int, total: int, progress: Callable[[int, int], None] | None
) -> GpuRankAnalysis | str:
    """The map in this process, with byte progress through the whole set of files."""

    def one(done: int, _total: int) -> None:
        if progress is not None:
            progress(base + done, total)

    return analyze_file(str(f), one)


def _on_pool(
    names: Sequence[str], sizes: Sequence[int], workers: int, progress: Callable[[int, int], None] | None
) -> list[GpuRankAnalysis | str]:
    out: list[GpuRankAnalysis | str] = []
    with ProcessPoolExecutor(max_workers=min(workers, len(names))) as pool:
        for i, result in enumerate(pool.map(analyze_file, names)):
            out.append(result)
            if progress is not None:
                progress(sum(sizes[: i + 1]), sum(sizes))
    return out


CONNECT_TIMEOUT = "5s"
"""How long to wait for a Dask scheduler to answer (Dask retries a refused connection until then)."""


def _on_dask(names: Sequence[str], address: str) -> list[GpuRankAnalysis | str]:
    try:
        distributed: Any = importlib.import_module("dask.distributed")
    except ImportError as exc:
        raise UsageError("--cluster needs Dask: pip install 'pinchpoint[dask]'") from exc
    try:
        client: Any = distributed.Client(address, timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        raise UsageError(f"no Dask scheduler answered at {address} ({exc})") from exc
    try:
        futures = client.map(analyze_file, list(names), pure=False)
        results: list[GpuRankAnalysis | str] = client.gather(futures)
    finally:
        client.close()
    return results


def _reduce_errors(path: Path, results: Sequence[GpuRankAnalysis | str]) -> list[GpuRankAnalysis]:
    """Drop unreadable ranks (with a warning on the others); number the ranks in file order when the
    traces don't say which rank they are or two say the same (as `read_trace_dir` does)."""
    ranks = [r for r in results if isinstance(r, GpuRankAnalysis)]
    failed = [r for r in results if isinstance(r, str)]
    if not ranks:
        raise TraceError(f"{path}: no readable trace ({failed[0]})" if failed else f"{path}: no trace")
    extra = [f"skipped an unreadable trace: {msg}" for msg in failed]
    numbers = [r.rank for r in ranks]
    if not all(r.meta.rank_known for r in ranks) or len(set(numbers)) != len(numbers):
        extra.append(RENUMBERED)
        ranks = [_renumber(r, i) for i, r in enumerate(ranks)]
    if extra:
        ranks = [dataclasses.replace(r, warnings=(*r.warnings, *extra)) for r in ranks]
    return sorted(ranks, key=lambda r: r.rank)


def _single(path: Path, results: Sequence[GpuRankAnalysis | str]) -> list[GpuRankAnalysis]:
    (result,) = results
    if isinstance(result, str):
        raise TraceError(result)
    return [result]


def _renumber(r: GpuRankAnalysis, rank: int) -> GpuRankAnalysis:
    return dataclasses.replace(
        r,
        meta=dataclasses.replace(r.meta, rank=rank, rank_known=False),
        collectives=dataclasses.replace(r.collectives, rank=rank),
    )


def default_workers() -> int:
    """Local pool size: the usable cores."""
    return max(1, len(os.sched_getaffinity(0)))
