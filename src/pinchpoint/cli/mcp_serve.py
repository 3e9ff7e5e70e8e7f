"""`pinchpoint mcp`: the tools of `cli/mcp_tools.py` served over the Model Context Protocol on stdio,
with the `mcp` SDK's low-level server (each tool's input and output schema given as written, not inferred).

Resources: `pinchpoint://categories` (every finding pinchpoint can name: what it means, why it is slow,
the fix), `pinchpoint://report/last` (the newest report this server wrote, else the newest recorded) and
`pinchpoint://report/last/html` (that run's HTML report, as a path). A long call sends progress
notifications (seconds out of its timeout) where the client asked for them; a call runs in a worker
thread, so the server answers other requests meanwhile."""

from __future__ import annotations

import contextlib
import inspect
import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from pinchpoint import __version__
from pinchpoint.cli import mcp_tools
from pinchpoint.cli.mcp_tools import Outcome, Workspace

CATEGORIES = "pinchpoint://categories"
LAST = "pinchpoint://report/last"
LAST_HTML = "pinchpoint://report/last/html"


def categories() -> list[dict[str, str]]:
    """Each rule's id, title and its own docstring (pattern, why it is slow, the fix, references)."""
    from pinchpoint.diagnosis.registry import RULES

    seen: dict[str, dict[str, str]] = {}
    for rule in RULES:
        key = str(rule.id.value)
        seen.setdefault(
            key, {"id": key, "title": rule.title, "about": inspect.cleandoc(type(rule).__doc__ or "")}
        )
    return list(seen.values())


def last_run(ws: Workspace) -> Path | None:
    """The newest run directory this server wrote, else the newest in the history."""
    if ws.runs:
        return ws.runs[-1]
    from pinchpoint.history import store

    newest = store.list_runs(1)
    return Path(newest[0].run_dir) if newest else None


def read_resource(ws: Workspace, uri: str) -> str:
    if uri == CATEGORIES:
        return json.dumps(categories(), indent=1)
    run = last_run(ws)
    if uri not in (LAST, LAST_HTML):
        raise mcp_tools.ToolFailure(f"no resource {uri}")
    if run is None:
        raise mcp_tools.ToolFailure("no run yet: call the `run` tool first")
    if uri == LAST_HTML:
        return str(run / "report.html")
    return (run / "report.json").read_text()


def build(ws: Workspace) -> Server[Any]:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    title=t.title,
                    description=t.description,
                    input_schema=t.input_schema,
                    output_schema=t.output_schema,
                )
                for t in mcp_tools.TOOLS
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        token = (params.meta or {}).get("progress_token") if params.meta is not None else None
        progress = _progress_sender(ctx, token)
        outcome: Outcome = await anyio.to_thread.run_sync(
            lambda: mcp_tools.call(ws, params.name, params.arguments, progress)
        )
        return types.CallToolResult(
            content=[types.TextContent(text=outcome.text)],
            structured_content=outcome.document,
            is_error=outcome.error,
        )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=CATEGORIES, name="categories", mime_type="application/json",
                               description="every finding pinchpoint can name: meaning, why, the fix"),
                types.Resource(uri=LAST, name="last report", mime_type="application/json",
                               description="report.json of the newest run"),
                types.Resource(uri=LAST_HTML, name="last report (HTML)", mime_type="text/plain",
                               description="the path of the newest run's report.html"),
            ]
        )  # fmt: skip

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            text = read_resource(ws, uri)
        except (mcp_tools.ToolFailure, OSError) as exc:
            raise ValueError(str(exc)) from None
        mime = "text/plain" if uri == LAST_HTML else "application/json"
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, text=text, mime_type=mime)]
        )

    return Server(
        "pinchpoint",
        version=__version__,
        instructions="Profile PyTorch programs: `run` a script for its bottlenecks, `try` a fix for its "
        "measured speedup, `diff` two runs; `pinchpoint://categories` says what each finding means.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read,
    )


def _progress_sender(ctx: Any, token: Any) -> mcp_tools.Progress:
    """Progress from the worker thread, sent on the server's event loop; nothing without a token."""
    if token is None:
        return lambda done, total, message: None

    def send(done: float, total: float, message: str) -> None:
        with contextlib.suppress(Exception):  # (a client gone, a closed stream: the call goes on)
            anyio.from_thread.run(ctx.session.send_progress_notification, token, done, total, message)

    return send


def serve(ws: Workspace) -> None:
    server = build(ws)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
