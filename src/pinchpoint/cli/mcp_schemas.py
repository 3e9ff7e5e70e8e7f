"""The JSON Schemas of `pinchpoint mcp`'s tools: inputs written here, outputs the typed documents
`pinchpoint schema` prints (report.json, try.json, a diff, a stack file's report)."""

from __future__ import annotations

from typing import Any

RUN_DOC = (
    "Run a Python script under pinchpoint (on this machine, with the server's Python) and return its "
    "report: the steps, every bottleneck with its share of the step, measured evidence and estimated "
    "speedup, and the fix. Stopped at timeout_s."
)
TRY_DOC = (
    "Apply a finding's fix without editing code (fix: a finding id, `top` or `all`), run the script again "
    "and return the measured speedup beside the predicted one."
)
ANALYZE_DOC = (
    "Diagnose files another profiler wrote: PyTorch profiler traces, Nsight Systems SQLite, XProf, perf "
    "script, folded stacks, VTune CSV."
)
ATTACH_DOC = (
    "Join a running Python program (pid) for duration_s, record what limits its speed, and leave it running "
    "as it was: its report."
)
DIFF_DOC = "Compare two runs (run directories or history ids): is b faster, and did the bottleneck move?"
RUNS_DOC = "List the runs pinchpoint recorded on this machine, newest first."
SHOW_DOC = "The report of a recorded run (history id) or a run directory."


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_TIMEOUT = {"type": "number", "minimum": 1, "maximum": 3600, "default": 600, "description": "seconds"}
_PROGRAM = {"type": "string", "description": "a Python script under the server's working directory"}
_ARGS = {"type": "array", "items": {"type": "string"}, "description": "the script's own arguments"}
_RUN_REF = {
    "type": ["string", "integer"],
    "description": "a history id (`runs`) or a run directory under the server's working directory",
}


def run_input() -> dict[str, Any]:
    return _object({"program": _PROGRAM, "args": _ARGS, "timeout_s": _TIMEOUT}, ("program",))


def try_input() -> dict[str, Any]:
    fix = {"type": "string", "default": "top", "description": "a finding's id (e.g. input.fetch), top or all"}
    steps = {"type": "integer", "minimum": 4, "description": "steps each trial times (default: try's own)"}
    return _object(
        {"program": _PROGRAM, "args": _ARGS, "fix": fix, "steps": steps, "timeout_s": _TIMEOUT}, ("program",)
    )


def analyze_input() -> dict[str, Any]:
    paths = {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 1,
        "description": "files or directories",
    }
    return _object({"paths": paths, "timeout_s": _TIMEOUT}, ("paths",))


def attach_input() -> dict[str, Any]:
    pid = {"type": "integer", "minimum": 1, "description": "the process to join"}
    duration = {"type": "number", "minimum": 1, "maximum": 3600, "default": 10, "description": "seconds"}
    return _object({"pid": pid, "duration_s": duration, "timeout_s": _TIMEOUT}, ("pid",))


def diff_input() -> dict[str, Any]:
    return _object({"a": _RUN_REF, "b": _RUN_REF, "timeout_s": _TIMEOUT}, ("a", "b"))


def runs_input() -> dict[str, Any]:
    return _object({"limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20}})


def show_input() -> dict[str, Any]:
    return _object({"run": _RUN_REF, "timeout_s": _TIMEOUT}, ("run",))


def document(name: str) -> dict[str, Any]:
    """The schema `pinchpoint schema NAME` prints."""
    if name == "try":
        from pinchpoint.report.try_doc import try_schema as schema
    elif name == "diff":
        from pinchpoint.report.diff_doc import diff_schema as schema
    elif name == "stacks":
        from pinchpoint.report.stacks_doc import stacks_schema as schema
    else:
        from pinchpoint.report.report_doc import report_schema as schema
    return schema()


def either(*names: str) -> dict[str, Any]:
    """One of several documents: each embedded whole (with its own `$id`, so its references resolve in
    it)."""
    defs = {n: {k: v for k, v in document(n).items() if k != "$schema"} for n in names}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": defs,
        "anyOf": [{"$ref": f"#/$defs/{n}"} for n in names],
    }


def runs_output() -> dict[str, Any]:
    run = _object(
        {
            "id": {"type": "integer"},
            "recorded_at": {"type": "string"},
            "run_dir": {"type": "string"},
            "command": {"type": "array", "items": {"type": "string"}},
            "median_ms": {"type": ["number", "null"]},
            "top": {"type": ["string", "null"], "description": "the top finding's id"},
        },
        ("id", "recorded_at", "run_dir", "command", "median_ms", "top"),
    )
    return _object({"runs": {"type": "array", "items": run}}, ("runs",))
