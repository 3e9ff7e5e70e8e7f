"""Many-rank trace analysis: time and memory for 2…64 ranks, local process pool vs a Dask cluster.

    .venv/bin/python benchmarks/ranks.py [--ranks 2 4 8 16 32 64] [--workers 2] [--source TRACE]

The ranks are copies of one real trace from ../shared/traces (default: HTA's
negative_queue_length_values_check rank0, an A100 job of 16 ranks; 25 MB of JSON), each with its own
`distributedInfo.rank`, gzipped like the profiler writes them, in a temporary directory. For each rank
count, each path runs in a fresh process: `report_traces(DIR, workers=W)` on a local process pool, and
`report_traces(DIR, cluster=ADDRESS)` on a Dask LocalCluster of W worker processes started for that
run (its start-up is not timed); up to `--inmem-upto` ranks also the old path, every trace read into one
process and then analysed. Prints wall seconds, the driver's peak RSS and the largest worker's
peak RSS, beside the peak RSS of one process that reads and analyses a single rank: a worker holds one
rank at a time, so its peak should stay near that however many ranks there are.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT.parent / "shared/traces/hta/negative_queue_length_values_check/rank0.json.gz"

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
mode, path, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
if mode == "one":
    from pinchpoint.pipeline.ranks import analyze_file
    t0 = time.perf_counter(); analyze_file(str(path)); wall = time.perf_counter() - t0
    worker = 0
elif mode == "inmem":  # every trace read into this process first, then analysed (the old path)
    from pinchpoint.analysis.gpu.trace_analysis import analyze_traces
    from pinchpoint.ingest.kineto import read_trace_dir
    t0 = time.perf_counter(); analyze_traces(read_trace_dir(path)); wall = time.perf_counter() - t0
    worker = 0
elif mode == "pool":
    from pinchpoint.pipeline.traces import report_traces
    t0 = time.perf_counter(); report_traces(path, workers=workers); wall = time.perf_counter() - t0
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
else:
    from dask.distributed import Client, LocalCluster
    from pinchpoint.pipeline.traces import report_traces
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    t0 = time.perf_counter(); report_traces(path, cluster=cluster.scheduler_address); wall = time.perf_counter() - t0
    with Client(cluster) as c:
        worker = max(c.run(lambda: __import__("resource").getrusage(0).ru_maxrss).values())
    cluster.close()
print(json.dumps({"wall": wall, "driver_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "worker_kb": worker}))
"""


def make_ranks(source: Path, n: int, out: Path) -> int:
    """`n` gzipped copies of `source` numbered 0..n-1; returns the JSON bytes of one."""
    text = gzip.decompress(source.read_bytes()).decode()
    pat = re.compile(r'("distributedInfo"\s*:\s*\{[^}]*"rank"\s*:\s*)\d+')
    if not pat.search(text):
        raise SystemExit(f"{source} has no distributedInfo.rank to renumber")
    out.mkdir(parents=True)
    for r in range(n):
        numbered = pat.sub(lambda m, r=r: f"{m.group(1)}{r}", text, count=1)  # type: ignore[misc]
        (out / f"rank{r:03d}.pt.trace.json.gz").write_bytes(gzip.compress(numbered.encode(), compresslevel=1))
    return len(text.encode())


def run(mode: str, path: Path, workers: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(path), str(workers)],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--source", type=Path, default=SOURCE)
    ap.add_argument(
        "--inmem-upto", type=int, default=16, help="also time the all-in-one-process path up to N ranks"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one_dir = Path(tmp) / "one"
        json_bytes = make_ranks(args.source, 1, one_dir)
        one = run("one", next(one_dir.iterdir()), 1)
        print(
            f"source {args.source.name}: {json_bytes / 1e6:.1f} MB JSON per rank; one rank alone: "
            f"{one['wall']:.2f} s, peak RSS {one['driver_kb'] / 1024:.0f} MiB; {args.workers} workers\n"
        )
        print(
            f"{'ranks':>5}  {'path':6} {'wall s':>7} {'s/rank':>7} {'driver MiB':>10} {'max worker MiB':>14}"
        )
        for n in args.ranks:
            d = Path(tmp) / f"r{n}"
            make_ranks(args.source, n, d)
            for mode in ("pool", "dask", "inmem") if n <= args.inmem_upto else ("pool", "dask"):
                r = run(mode, d, args.workers)
                print(
                    f"{n:>5}  {mode:6} {r['wall']:>7.2f} {r['wall'] / n:>7.3f} {r['driver_kb'] / 1024:>10.0f} "
                    f"{r['worker_kb'] / 1024:>14.0f}",
                    flush=True,
                )
            for f in d.iterdir():
                f.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
