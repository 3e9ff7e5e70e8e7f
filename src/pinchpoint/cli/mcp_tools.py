"""The tools `pinchpoint mcp` serves, without the MCP SDK: each tool's JSON Schemas (input, and output: the
typed documents `pinchpoint schema` prints), the paths it may touch, and its work — the same command a
person types, run as a child process (`python -m pinchpoint ...  --json OUT`) so that a crash, a hang or a
timeout ends that call only and the server keeps serving.

A path argument must lie under the server's root (its working directory) or a folder allowed with
`--allow`; anything else is refused before a process starts. A call runs no command but the tool's own
(`run` and `try` run the named Python script with the server's interpreter, nothing else)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinchpoint.cli import mcp_schemas as schemas

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 3600.0
STOP_GRACE_S = 15.0
"""After a timeout's SIGINT (the report of what ran is written), how long before SIGKILL."""
POLL_S = 0.5
LOG_TAIL = 600


class ToolFailure(Exception):
    """A call that cannot be served: its one line goes back to the client as the tool's error."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a call gives back: the typed document (structured) and a few lines for a reader."""

    text: str
    document: dict[str, Any] | None = None
    error: bool = False


@dataclass(slots=True)
class Workspace:
    root: Path
    allowed: tuple[Path, ...] = ()
    runs: list[Path] = field(default_factory=list)
    """Run directories this server wrote, oldest first (the `last report` resource reads the newest)."""

    def path(self, value: object, what: str, *, must_exist: bool = True) -> Path:
        """`value` as a path under the root or an allowed folder (relative ones from the root)."""
        if not isinstance(value, str) or not value:
            raise ToolFailure(f"{what}: a path is needed")
        p = Path(value)
        p = (p if p.is_absolute() else self.root / p).resolve()
        if not any(p == r or r in p.parents for r in (self.root.resolve(), *self.allowed)):
            raise ToolFailure(
                f"{what}: {value} is outside {self.root} (start the server with --allow to permit it)"
            )
        if must_exist and not p.exists():
            raise ToolFailure(f"{what}: no such file or directory: {value}")
        return p

    def new_run_dir(self, tool: str) -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = self.root / "pinchpoint-runs" / f"mcp-{tool}-{stamp}"
        out, n = base, 1
        while out.exists():
            n += 1
            out = base.with_name(f"{base.name}-{n}")
        return out


Progress = Callable[[float, float, str], None]
"""(done, total, message): how far a long call is (seconds out of its timeout)."""


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    call: Callable[[Workspace, Mapping[str, Any], Progress], Outcome]


def _timeout(args: Mapping[str, Any]) -> float:
    t = args.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 1 <= t <= MAX_TIMEOUT_S:
        raise ToolFailure(f"timeout_s: a number of seconds from 1 to {MAX_TIMEOUT_S:g}")
    return float(t)


def _words(args: Mapping[str, Any], key: str) -> list[str]:
    v = args.get(key, [])
    if not isinstance(v, list) or not all(isinstance(w, str) for w in v):
        raise ToolFailure(f"{key}: a list of strings")
    return list(v)


def _script(ws: Workspace, args: Mapping[str, Any]) -> Path:
    p = ws.path(args.get("program"), "program")
    if not p.is_file() or p.suffix != ".py":
        raise ToolFailure(f"program: {args.get('program')} is not a Python script (.py)")
    return p


def pinchpoint(
    ws: Workspace, words: Sequence[str], timeout_s: float, progress: Progress, what: str
) -> tuple[int, dict[str, Any] | None, str]:
    """`python -m pinchpoint WORDS --json OUT` under `timeout_s`: (exit code, the JSON it wrote, the tail
    of its output). Past the timeout: SIGINT to its process group (a run writes what it captured), then
    SIGKILL after `STOP_GRACE_S`; the exit code is then -1."""
    with tempfile.TemporaryDirectory(prefix="pinchpoint-mcp-") as tmp:
        out, log = Path(tmp) / "out.json", Path(tmp) / "log.txt"
        argv = [sys.executable, "-m", "pinchpoint", *words[:1], "--json", str(out), *words[1:]]
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                argv, cwd=ws.root, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "PINCHPOINT_NO_COLOR": "1", "NO_COLOR": "1"},
            )  # fmt: skip
            code = _wait(proc, timeout_s, progress, what)
        doc = _read_json(out)
        tail = log.read_text(errors="replace")[-LOG_TAIL:] if log.exists() else ""
    return code, doc, tail


def _wait(proc: subprocess.Popen[bytes], timeout_s: float, progress: Progress, what: str) -> int:
    start = time.monotonic()
    while proc.poll() is None:
        elapsed = time.monotonic() - start
        if elapsed > timeout_s:
            _stop(proc)
            return -1
        progress(round(elapsed, 1), timeout_s, f"{what}: {elapsed:.0f} s of at most {timeout_s:g} s")
        time.sleep(POLL_S)
    return int(proc.returncode)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _last_line(tail: str) -> str:
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def summary(doc: Mapping[str, Any], run_dir: Path | None = None) -> str:
    """A few lines for a reader: the steps and each finding with its share and estimate."""
    steps = doc.get("steps") or {}
    lines = []
    if isinstance(steps, dict) and steps.get("median_ms") is not None:
        lines.append(f"{steps.get('count', '?')} steps, median {steps['median_ms']:.3g} ms")
    for i, f in enumerate(doc.get("findings") or [], 1):
        if isinstance(f, dict):
            lines.append(
                f"{i}. {f.get('id')}: {f.get('share', 0):.0%} of the step, "
                f"est. x{f.get('estimated_speedup', 1):.2f} ({f.get('estimate_basis', '?')})"
            )
    if run_dir is not None:
        lines.append(f"run directory: {run_dir} (HTML: {run_dir / 'report.html'})")
    return "\n".join(lines) or "no findings"


def run_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    script, extra, timeout = _script(ws, args), _words(args, "args"), _timeout(args)
    out = ws.new_run_dir("run")
    words = ["run", "-q", "-o", str(out), "--", sys.executable, str(script), *extra]
    return _recorded(
        ws, words, out, timeout, progress, f"timed out after {timeout:g} s: the program was stopped"
    )


def _recorded(
    ws: Workspace, words: list[str], out: Path, timeout: float, progress: Progress, stopped: str
) -> Outcome:
    """A command that records a run into `out` (run, attach): its report, kept as the newest run."""
    code, doc, tail = pinchpoint(ws, words, timeout, progress, words[0])
    if doc is not None:
        ws.runs.append(out)
    if code == -1:
        raise ToolFailure(f"{stopped} (what it recorded is in {out})")
    if doc is None:
        raise ToolFailure(f"pinchpoint {words[0]} failed (exit {code}): {_last_line(tail)}")
    note = "" if code == 0 else f"\nexit {code}: {_last_line(tail)}"
    return Outcome(text=summary(doc, out) + note, document=doc, error=code != 0)


def try_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    script, extra, timeout = _script(ws, args), _words(args, "args"), _timeout(args)
    fix = args.get("fix", "top")
    if not isinstance(fix, str) or not fix:
        raise ToolFailure("fix: a finding's id, `top` or `all`")
    steps = args.get("steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 4):
        raise ToolFailure("steps: a whole number, at least 4")
    out = ws.new_run_dir("try")
    counted = ["--steps", str(steps)] if steps is not None else []
    words = ["try", "--fix", fix, *counted, "-o", str(out), "--", sys.executable, str(script), *extra]
    code, doc, tail = pinchpoint(ws, words, timeout, progress, "try")
    if code == -1:
        raise ToolFailure(f"timed out after {timeout:g} s: the trial runs were stopped")
    if doc is None:
        raise ToolFailure(f"pinchpoint try failed (exit {code}): {_last_line(tail)}")
    rows = [r for r in doc.get("tried") or [] if isinstance(r, dict)]
    return Outcome(text="\n".join(map(_tried, rows)) or "no fix was tried", document=doc, error=code != 0)


def _tried(r: Mapping[str, Any]) -> str:
    head = f"{r.get('id')}: {r.get('fix')}"
    if isinstance(r.get("speedup"), (int, float)):
        predicted = r.get("predicted")
        said = f" (predicted x{predicted:.2f})" if isinstance(predicted, (int, float)) else ""
        return f"{head}: measured x{r['speedup']:.2f}{said}"
    return f"{head}: {r.get('cannot') or r.get('error') or 'not measured'}"


def analyze_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    paths = _words(args, "paths")
    if not paths:
        raise ToolFailure("paths: at least one profiler file or directory")
    files, timeout = [str(ws.path(p, "paths")) for p in paths], _timeout(args)
    code, doc, tail = pinchpoint(ws, ["analyze", "-q", *files], timeout, progress, "analyze")
    if code == -1:
        raise ToolFailure(f"timed out after {timeout:g} s reading {', '.join(paths)}")
    if doc is None or code != 0:
        raise ToolFailure(_last_line(tail))
    return Outcome(text=summary(doc), document=doc)


def attach_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    pid, duration = args.get("pid"), args.get("duration_s", 10)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 1:
        raise ToolFailure("pid: a process id")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or not 1 <= duration <= 3600:
        raise ToolFailure("duration_s: seconds from 1 to 3600")
    if not Path(f"/proc/{pid}").exists():
        raise ToolFailure(f"pid: no process {pid} on this machine")
    out = ws.new_run_dir("attach")
    words = ["attach", str(pid), "-q", "--duration", f"{duration:g}", "-o", str(out)]
    timeout = max(_timeout(args), duration + 60)
    return _recorded(ws, words, out, timeout, progress, "attach did not end within its timeout")


def diff_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    a, b = (_run_ref(ws, args.get(k), k) for k in ("a", "b"))
    _, doc, tail = pinchpoint(ws, ["diff", a, b], _timeout(args), progress, "diff")
    if doc is None:
        raise ToolFailure(_last_line(tail))
    verdict = doc.get("verdict") or ()
    text = "\n".join(str(v) for v in verdict) if isinstance(verdict, list) else ""
    return Outcome(text=text or f"compared {a} and {b}", document=doc)


def _run_ref(ws: Workspace, value: object, what: str) -> str:
    """A history id (`runs`) as it is, or a run directory under the root."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.lstrip("#").isdigit():
        return value.lstrip("#")
    return str(ws.path(value, what))


def runs_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    from pinchpoint.history import store

    limit = args.get("limit", 20)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 200:
        raise ToolFailure("limit: a whole number from 1 to 200")
    runs = [
        {"id": r.id, "recorded_at": r.recorded_at, "run_dir": r.run_dir, "command": list(r.command),
         "median_ms": r.median_ms, "top": r.top}
        for r in store.list_runs(limit)
    ]  # fmt: skip
    text = "\n".join(f"#{r['id']} {r['recorded_at']} {r['top'] or '-'} {r['run_dir']}" for r in runs)
    return Outcome(text=text or "no run recorded yet", document={"runs": runs})


def show_tool(ws: Workspace, args: Mapping[str, Any], progress: Progress) -> Outcome:
    ref = _run_ref(ws, args.get("run"), "run")
    code, doc, tail = pinchpoint(ws, ["show", ref], _timeout(args), progress, "show")
    if doc is None or code != 0:
        raise ToolFailure(_last_line(tail))
    return Outcome(text=summary(doc), document=doc)


TOOLS: tuple[Tool, ...] = (
    Tool("run", "Profile a program", schemas.RUN_DOC, schemas.run_input(), schemas.document("report"), run_tool),
    Tool("try", "Measure a fix", schemas.TRY_DOC, schemas.try_input(), schemas.document("try"), try_tool),
    Tool("analyze", "Diagnose profiler files", schemas.ANALYZE_DOC, schemas.analyze_input(),
         schemas.either("report", "stacks"), analyze_tool),
    Tool("attach", "Profile a running program", schemas.ATTACH_DOC, schemas.attach_input(),
         schemas.document("report"), attach_tool),
    Tool("diff", "Compare two runs", schemas.DIFF_DOC, schemas.diff_input(), schemas.document("diff"), diff_tool),
    Tool("runs", "List recorded runs", schemas.RUNS_DOC, schemas.runs_input(), schemas.runs_output(), runs_tool),
    Tool("show", "A recorded run's report", schemas.SHOW_DOC, schemas.show_input(), schemas.document("report"),
         show_tool),
)  # fmt: skip


def call(ws: Workspace, name: str, args: Mapping[str, Any] | None, progress: Progress) -> Outcome:
    """One tool call; never raises: a failure is an error outcome with one line."""
    tool = next((t for t in TOOLS if t.name == name), None)
    if tool is None:
        return Outcome(text=f"no tool named {name!r} (tools: {', '.join(t.name for t in TOOLS)})", error=True)
    try:
        return tool.call(ws, dict(args or {}), progress)
    except ToolFailure as exc:
        return Outcome(text=str(exc), error=True)
    except Exception as exc:  # (a bug of ours: one line, and the server goes on)
        return Outcome(text=f"pinchpoint failed: {type(exc).__name__}: {exc}", error=True)
