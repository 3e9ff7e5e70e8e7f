"""The report of a process watched from outside (`pinchpoint attach` without its agent): the watch
read from the run directory (`analysis/outside.py`), judged by the OUTSIDE rules
(`diagnosis/rules/outside.py`), written as the run directory's outside.json (`report/outside_doc.py`;
the run has no steps, so no report.json)."""

from __future__ import annotations

import json
from pathlib import Path

from pinchpoint.analysis.outside import outside_watch
from pinchpoint.diagnosis.engine import diagnose_outside
from pinchpoint.errors import RunDirError
from pinchpoint.ingest.fields import as_dict, load_json
from pinchpoint.ingest.rundir import read_run_dir
from pinchpoint.report.outside_doc import OutsideDoc, WatchedAttach, build_outside

OUTSIDE_FILE = "outside.json"


def report_outside(run_dir: Path, json_path: Path | None = None) -> OutsideDoc:
    """Build, write (run_dir/outside.json, and `json_path`) and return the outside report."""
    run = read_run_dir(run_dir)
    meta = load_json(run_dir / "meta.json", [])
    attach = as_dict(as_dict(meta).get("attach"))
    outside = as_dict(attach.get("outside"))
    pid = attach.get("pid")
    if not outside or not isinstance(pid, int):
        raise RunDirError(f"{run_dir} is not a run watched from outside (meta.json has no attach.outside)")
    cpu = {
        str(k): float(v)
        for k, v in as_dict(outside.get("thread_cpu_s")).items()
        if isinstance(v, (int, float))
    }
    watch = outside_watch(run, pid, float(outside.get("wall_s") or 0.0), cpu)
    duration, ended, reason = attach.get("duration_s"), attach.get("ended"), outside.get("reason")
    doc = build_outside(
        run,
        WatchedAttach(
            pid=pid,
            duration_s=float(duration) if isinstance(duration, (int, float)) else None,
            ended=ended if isinstance(ended, str) else None,
        ),
        reason if isinstance(reason, str) else None,
        watch,
        diagnose_outside(watch),
    )
    text = json.dumps(doc.to_dict(), indent=1) + "\n"
    (run_dir / OUTSIDE_FILE).write_text(text)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(text)
    return doc
