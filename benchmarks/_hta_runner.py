"""Run HolisticTraceAnalysis on one trace file and print its numbers as JSON (runs in HTA's own venv).

Not part of pinchpoint: `hta_compare.py` runs this with the interpreter of a throwaway venv where HTA is
installed, so pinchpoint never imports HTA. Usage: `python _hta_runner.py TRACE.json.gz`, or
`python _hta_runner.py --kernel-types < names.json` to print HTA's kernel type of each name (a JSON list).
Settings: the file is loaded as rank 0 with `include_last_profiler_step=True`; the caller sets
`HTA_DISABLE_NS_ROUNDING=1` in the environment.

Besides the temporal breakdown it dumps the rows HTA's temporal breakdown looked at (every row with a
stream), with HTA's kernel type, so the comparison can explain each disagreement from the data.
"""

from __future__ import annotations

import json
import logging
import os
import sys

from hta.trace_analysis import TraceAnalysis
from hta.utils.utils import get_kernel_type


def main(path: str) -> None:
    logging.disable(logging.CRITICAL)
    out: dict[str, object] = {"path": path, "rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING")}
    ta = TraceAnalysis(
        trace_files={0: path}, trace_dir=os.path.dirname(path), include_last_profiler_step=True
    )
    df = ta.t.get_trace(0)
    sym = ta.t.symbol_table.get_sym_table()
    rows = df[df["stream"].ne(-1)]
    out["rows"] = {
        "ts_us": [float(x) for x in rows["ts"]],
        "dur_us": [float(x) for x in rows["dur"]],
        "name": [sym[int(i)] for i in rows["name"]],
        "cat": [sym[int(i)] for i in rows["cat"]],
        "stream": [int(x) for x in rows["stream"]],
        "correlation": [int(x) for x in rows["correlation"]],
    }
    out["kernel_type"] = {n: get_kernel_type(n) for n in set(out["rows"]["name"])}  # type: ignore[index]
    try:
        tb = ta.get_temporal_breakdown(visualize=False)
        out["temporal"] = json.loads(tb.to_json(orient="records"))[0]
    except Exception as exc:  # HTA asserts on some traces; report it instead of crashing
        out["temporal_error"] = f"{type(exc).__name__}: {exc}"
    try:
        idle, _ = ta.get_idle_time_breakdown(visualize=False)
        out["idle_by_stream"] = json.loads(idle.to_json(orient="records"))
    except Exception as exc:
        out["idle_error"] = f"{type(exc).__name__}: {exc}"
    try:
        ov = ta.get_comm_comp_overlap(visualize=False)
        out["comm_comp_overlap_pctg"] = json.loads(ov.to_json(orient="records"))[0].get(
            "comp_comm_overlap_pctg"
        )
    except Exception as exc:
        out["overlap_error"] = f"{type(exc).__name__}: {exc}"
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "--kernel-types":
        json.dump({n: get_kernel_type(n) for n in json.load(sys.stdin)}, sys.stdout)
    else:
        main(sys.argv[1])
