"""Speed and memory of `read_nsys` on a large Nsight Systems export built from the real one.

    python benchmarks/nsys_reader.py [--size-mb 200] [--rows all|read] [--repeat 3] [--keep] [--source FILE]

The big export is the source's rows copied along the time axis: each copy is one `INSERT ... SELECT`
per table, its times shifted by the source's span and its ids (correlation, callchain, sample ids) by
the largest id, so the copies never collide. `--rows all` (default) copies every time-stamped table in
the source's own proportions (CUDA and OS runtime calls, kernels, copies, syncs, and the CPU samples,
callchains and scheduling events a default `nsys profile` also records, which the reader skips);
`--rows read` copies only the tables the reader reads, the worst case for memory per file byte.

The generator and every measurement run in fresh subprocesses (ru_maxrss survives exec on Linux), so
the peak RSS printed is the reader's alone; the interpreter's RSS with pinchpoint imported is printed
beside it. Files go to a temporary directory, never the repository; --keep leaves them there.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests/data/nsys/cloverleaf/perlmutter-cloverleaf-cuda.sqlite"
READ_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "NVTX_EVENTS",
    "OSRT_API",
)
SKIPPED_TABLES = ("OSRT_CALLCHAINS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS", "SCHED_EVENTS")
TIME_COLUMNS = ("start", "end", "timestamp")
ID_COLUMNS = {"correlationId", "callchainId"}
ID_TABLES = {"OSRT_CALLCHAINS", "COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"}
"""Tables whose `id` is a key other rows point at (OSRT_API.callchainId, SAMPLING_CALLCHAINS.id)."""

CHILD = """
import json, resource, sys, time
from pathlib import Path
from pinchpoint.ingest.nsys import read_nsys_ranks
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
traces = read_nsys_ranks(Path(sys.argv[1]))
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "events": sum(len(t.events) for t in traces), "rss_kb": rss, "base_kb": base}))
"""


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in con.execute(f'PRAGMA table_info("{table}")')]


def _copy_sql(
    con: sqlite3.Connection, table: str, n_rows: int, copies: tuple[int, int], span: int, id_off: int
) -> str:
    exprs = []
    for c in _columns(con, table):
        q = f't."{c}"'
        if c in TIME_COLUMNS:
            q = f"{q} + k.k * {span}"
        elif c in ID_COLUMNS or (c == "id" and table in ID_TABLES):
            q = f"{q} + k.k * {id_off}"
        exprs.append(q)
    lo, hi = copies
    return (
        f"WITH RECURSIVE k(k) AS (SELECT {lo} UNION ALL SELECT k + 1 FROM k WHERE k < {hi}) "
        f'INSERT INTO "{table}" SELECT {", ".join(exprs)} FROM k CROSS JOIN "{table}" AS t '
        f"WHERE t.rowid <= {n_rows}"
    )


def build(source: Path, out: Path, size_mb: float, rows: str) -> None:
    """Copy `source` to `out` and replicate its rows until the file is about `size_mb` MB."""
    shutil.copyfile(source, out)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    have = {str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    tables = [t for t in (*READ_TABLES, *(SKIPPED_TABLES if rows == "all" else ())) if t in have]
    n_rows = {t: int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0) for t in tables}
    timed = [t for t in tables if "start" in _columns(con, t)]
    lo = min(int(con.execute(f'SELECT min(start) FROM "{t}"').fetchone()[0] or 0) for t in timed)
    hi = max(int(con.execute(f'SELECT max(start) FROM "{t}"').fetchone()[0] or 0) for t in timed)
    span = hi - lo + 1_000_000
    id_off = 1 + max(
        int(con.execute(f'SELECT max("{c}") FROM "{t}"').fetchone()[0] or 0)
        for t in tables
        for c in _columns(con, t)
        if c in ID_COLUMNS or (c == "id" and t in ID_TABLES)
    )

    def size() -> int:
        return int(con.execute("PRAGMA page_count").fetchone()[0]) * int(
            con.execute("PRAGMA page_size").fetchone()[0]
        )

    def replicate(first: int, last: int) -> None:
        for t in tables:
            con.execute(_copy_sql(con, t, n_rows[t], (first, last), span, id_off))
        con.commit()

    before = size()
    trial = 4
    replicate(1, trial)
    per_copy = max(1, (size() - before) // trial)
    total = max(trial, int((size_mb * 1e6 - before) / per_copy))
    if total > trial:
        replicate(trial + 1, total)
    con.close()


def measure(path: Path) -> dict[str, float]:
    res = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True)
    out: dict[str, float] = json.loads(res.stdout)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--size-mb", type=float, default=200.0, help="target export size (1024 for the 1 GB target)"
    )
    p.add_argument("--rows", choices=("all", "read"), default="all", help="which tables to replicate")
    p.add_argument("--source", type=Path, default=SOURCE, help="the export to replicate")
    p.add_argument("--repeat", type=int, default=3, help="timed reads (fresh process each)")
    p.add_argument("--keep", action="store_true", help="leave the generated export in its temp directory")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="pinchpoint-nsys-bench-"))
    big = tmp / f"nsys-{args.rows}-{int(args.size_mb)}mb.sqlite"
    try:
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import nsys_reader as b; "
        code += f"b.build(b.Path({str(args.source)!r}), b.Path({str(big)!r}), {args.size_mb}, {args.rows!r})"
        subprocess.run([sys.executable, "-c", code], check=True)
        file_mb = big.stat().st_size / 1e6
        runs = [measure(big) for _ in range(max(1, args.repeat))]
        best = min(runs, key=lambda r: r["s"])
        peak_mb = max(r["rss_kb"] for r in runs) / 1e3
        base_mb = best["base_kb"] / 1e3
        print(
            f"export: {big.name}  {file_mb:.0f} MB  ({args.rows} tables replicated)  {int(best['events'])} events read"
        )
        print(
            "read_nsys_ranks: " + ", ".join(f"{r['s']:.2f} s" for r in runs) + f"  (best {best['s']:.2f} s)"
        )
        print(
            f"  {file_mb / best['s']:.0f} MB/s of export, {best['events'] / best['s'] / 1e6:.2f} M events/s"
        )
        print(
            f"peak RSS {peak_mb:.0f} MB = {peak_mb / file_mb:.2f}x the file "
            f"(interpreter with pinchpoint imported: {base_mb:.0f} MB; above it: {(peak_mb - base_mb) / file_mb:.2f}x)"
        )
        s_gb = best["s"] * 1e3 / file_mb
        print(f"scaled to 1 GB: ~{s_gb:.1f} s (target <= 10 s); memory target <= 0.5x the file")
    finally:
        if args.keep:
            print(f"kept {big}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
