"""Orchestration: from what a command names (a run directory, traces, a history id) to a report.

    rundir    a `pinchpoint run` directory -> report.json, report.html, the history database
    traces    profiler traces another tool wrote -> a report (`pinchpoint analyze`)
    ranks     the per-rank map of `traces`: here, on a process pool, or on a Dask cluster
    export    a run in other viewers' formats (`pinchpoint export`)
    resolve   a run named on the command line (directory or history id) -> its directory or report

The layers below it (ingest, analysis, diagnosis, report, history) don't import it; the command line,
`pinchpoint.profile()` (`pinchpoint.notebook`) and `python -m pinchpoint` do.
"""
