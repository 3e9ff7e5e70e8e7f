"""pinchpoint mcp [--root DIR] [--allow DIR ...]: pinchpoint's commands as a Model Context Protocol server on
stdio, for coding agents and MCP clients (`cli/mcp_serve.py`, tools in `cli/mcp_tools.py`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


class McpCommand:
    NAME = "mcp"
    HELP = "serve pinchpoint's commands (run, try, analyze, attach, diff, runs, show) over MCP on stdio"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--root", default=".", help="the folder the tools may read and run in (default: the current one)"
        )
        parser.add_argument(
            "--allow", action="append", default=[], metavar="DIR", help="another folder the tools may read"
        )

    def execute(self, args: argparse.Namespace) -> int:
        try:
            from pinchpoint.cli.mcp_serve import serve
        except ImportError as exc:
            print(
                f"pinchpoint: error: `pinchpoint mcp` needs the MCP SDK ({exc.name} is missing): "
                "pip install 'pinchpoint[mcp]'",
                file=sys.stderr,
            )
            return 2
        from pinchpoint.cli.mcp_tools import Workspace

        root = Path(args.root).resolve()
        if not root.is_dir():
            print(f"pinchpoint: error: --root {args.root} is not a folder", file=sys.stderr)
            return 2
        serve(Workspace(root=root, allowed=tuple(Path(a).resolve() for a in args.allow)))
        return 0
