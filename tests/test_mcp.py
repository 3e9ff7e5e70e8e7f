"""`pinchpoint mcp` (issue 38): the tools' schemas and path rules, then the server itself over stdio with the
`mcp` SDK's own client: a planted example run and its fix tried through it, bad calls answered as tool
errors of one line while the server keeps serving, every structured answer valid against its tool's
output schema."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from pinchpoint.cli import mcp_tools
from pinchpoint.cli.mcp_tools import TOOLS, Workspace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "input_fetch.py"


def _quiet(done: float, total: float, message: str) -> None:
    pass


def test_every_tool_has_valid_input_and_output_schemas() -> None:
    assert [t.name for t in TOOLS] == ["run", "try", "analyze", "attach", "diff", "runs", "show"]
    for t in TOOLS:
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
        jsonschema.Draft202012Validator.check_schema(t.output_schema)
        assert t.input_schema["type"] == "object" and t.output_schema["type"] == "object", t.name


def test_paths_outside_the_root_are_refused_before_anything_runs(tmp_path: Path) -> None:
    ws = Workspace(root=tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    assert ws.path("train.py", "program") == (tmp_path / "train.py").resolve()
    for bad in ("/etc/passwd", "../outside.py", str(tmp_path.parent / "x.py")):
        out = mcp_tools.call(ws, "run", {"program": bad}, _quiet)
        assert out.error and "outside" in out.text and "\n" not in out.text, out.text
    other = tmp_path.parent / f"{tmp_path.name}-traces"
    other.mkdir()
    (other / "trace.json").write_text("{}")
    allowed = Workspace(root=tmp_path, allowed=(other.resolve(),))
    assert allowed.path(str(other / "trace.json"), "paths") == (other / "trace.json").resolve()


@pytest.mark.parametrize(
    ("name", "args", "said"),
    [
        ("run", {"program": "missing.py"}, "no such file"),
        ("run", {"program": "notes.txt"}, "not a Python script"),
        ("run", {"program": "train.py", "timeout_s": 0}, "timeout_s"),
        ("run", {"program": "train.py", "args": "--steps 3"}, "args"),
        ("try", {"program": "train.py", "steps": 1}, "steps"),
        ("analyze", {"paths": []}, "paths"),
        ("runs", {"limit": "all"}, "limit"),
        ("attach", {"pid": 0}, "pid"),
        ("attach", {"pid": 2**22 + 7}, "no process"),
        ("nope", {}, "no tool named"),
    ],
)
def test_bad_calls_are_one_line_errors(tmp_path: Path, name: str, args: dict[str, Any], said: str) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "notes.txt").write_text("hello\n")
    out = mcp_tools.call(Workspace(root=tmp_path), name, args, _quiet)
    assert out.error and said in out.text and "\n" not in out.text and out.document is None, out.text


def _validate(tool: str, doc: Any) -> None:
    (spec,) = [t for t in TOOLS if t.name == tool]
    jsonschema.Draft202012Validator(spec.output_schema).validate(doc)


async def _session_calls(root: Path) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "pinchpoint", "mcp", "--root", str(root)], cwd=str(root)
    )
    got: dict[str, Any] = {"progress": []}

    async def progressed(done: float, total: float | None, message: str | None) -> None:
        got["progress"].append((done, total, message))

    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        got["tools"] = (await session.list_tools()).tools
        got["missing"] = await session.call_tool("run", {"program": "absent.py"})
        got["not_a_trace"] = await session.call_tool("analyze", {"paths": ["notes.txt"]})
        got["timeout"] = await session.call_tool("run", {"program": "forever.py", "timeout_s": 1})
        got["no_pid"] = await session.call_tool("attach", {"pid": 2**22 + 7})
        args = {"program": "input_fetch.py", "args": ["--steps", "30"]}
        got["run"] = await session.call_tool("run", args, progress_callback=progressed)
        got["try"] = await session.call_tool("try", {**args, "fix": "input.fetch", "steps": 12})
        got["last"] = await session.read_resource("pinchpoint://report/last")
        got["categories"] = await session.read_resource("pinchpoint://categories")
        got["after"] = (await session.list_tools()).tools  # still serving
    return got


@pytest.mark.e2e
def test_a_client_runs_a_planted_example_and_tries_its_fix_through_the_server(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    (tmp_path / "notes.txt").write_text("not a trace\n")
    (tmp_path / "forever.py").write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    got = anyio.run(_session_calls, tmp_path)
    assert [t.name for t in got["tools"]] == [t.name for t in TOOLS] == [t.name for t in got["after"]]
    assert all(t.output_schema and t.input_schema for t in got["tools"])
    for bad, said in (
        ("missing", "no such file"),
        ("not_a_trace", "not a JSON trace"),
        ("timeout", "timed out after 1 s"),
        ("no_pid", "no process"),
    ):
        result = got[bad]
        (line,) = [c.text for c in result.content]
        assert result.is_error and said in line and "\n" not in line and "Traceback" not in line, (bad, line)
    run = got["run"]
    assert not run.is_error, run.content
    _validate("run", run.structured_content)
    top = run.structured_content["findings"][0]
    assert top["id"] == "input.fetch" and top["estimated_speedup"] > 1, [c.text for c in run.content]
    assert got["progress"] and all(total == 600 for _, total, _ in got["progress"]), got["progress"]
    tried = got["try"]
    assert not tried.is_error, tried.content
    _validate("try", tried.structured_content)
    (row,) = [r for r in tried.structured_content["tried"] if r["id"] == "input.fetch"]
    assert row["speedup"] is not None and "measured x" in tried.content[0].text, tried.content[0].text
    last = json.loads(got["last"].contents[0].text)
    assert last["findings"][0]["id"] == "input.fetch"
    ids = {c["id"] for c in json.loads(got["categories"].contents[0].text)}
    assert {"host.python", "input.fetch", "compute.recompute", "serve.batching"} <= ids
