"""The package's shape, checked from the source: who may import what, torch only in capture/, small modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pinchpoint

SRC = Path(pinchpoint.__file__).resolve().parent
MODULES = sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 500
KNOWN_OVERSIZE: dict[str, str] = {}
"""Modules already past the limit: each must shrink (then drop it here); new offenders fail outright."""


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["pinchpoint", *parts])


def imports(path: Path, source: str | None = None) -> list[tuple[str, int]]:
    """Every module an import statement names (anywhere in the file), absolute, with its line number.

    `source` stands in for the file's text (to test the scanner on a module that is not on disk).
    """
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.append((base, node.lineno))
            out.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            arg = node.args[0] if node.args else None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.append((arg.value, node.lineno))
    return out


def _is_dynamic_import(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "__import__") or (
        isinstance(f, ast.Attribute) and f.attr == "import_module"
    )


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _offenders(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{_rel(p)}:{line} imports {name}"
        for p in paths
        for name, line in imports(p)
        if any(_under(name, f) for f in forbidden)
    ]


def test_the_source_tree_is_found() -> None:
    rels = {_rel(p) for p in MODULES}
    assert {
        "pipeline/rundir.py", "pipeline/traces.py", "pipeline/resolve.py", "notebook.py", "trace/run.py",
        "capture/agent.py", "report/terminal.py", "cli/main.py", "compare/diff.py", "history/store.py",
    } <= rels  # fmt: skip
    assert not {"pipeline.py", "rank_map.py", "capture/api.py", "history/resolve.py"} & rels


def test_import_scanner_sees_every_form() -> None:
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch import optim\n"
        "def f():\n    import torch.cuda\n    from ..report import terminal\n    from . import steps\n"
        "    importlib.import_module('torch.profiler')\n    __import__('torch')\n"
    )
    names = [n for n, _ in imports(SRC / "analysis" / "not_a_module.py", source)]
    assert names.count("torch") >= 2 and "torch.nn" in names and "torch.optim" in names
    assert "torch.cuda" in names and "torch.profiler" in names
    assert "pinchpoint.report" in names and "pinchpoint.report.terminal" in names
    assert "pinchpoint.analysis.steps" in names


def test_only_capture_imports_torch() -> None:
    outside = [p for p in MODULES if not _rel(p).startswith("capture/")]
    assert _offenders(outside, ("torch",)) == []


REPORT_TYPES = ("pinchpoint.report.report_doc", "pinchpoint.report.document")
"""The typed report.json and the machinery that reads it: what compare/ reads reports as."""


ALLOWED_UI = ("cli/", "report/", "pipeline/", "notebook.py", "__main__.py")
"""Who may import cli/ or report/: the pipeline writes the reports, `notebook.py` (`pinchpoint.profile()`)
renders one at the end of its `with` block, `__main__.py` is `python -m pinchpoint`."""


def test_nothing_imports_cli_or_report_except_the_ui_layer() -> None:
    """...but compare/ reads reports as the typed documents (`REPORT_TYPES`), which are data."""
    others = [p for p in MODULES if not _rel(p).startswith(ALLOWED_UI)]
    found = _offenders(others, ("pinchpoint.cli", "pinchpoint.report"))
    data = [o for o in found if o.startswith("compare/") and any(_under(o.split()[-1], t) for t in REPORT_TYPES)]
    assert [o for o in found if o not in data] == []


PIPELINE_USERS = ("pipeline/", "cli/", "notebook.py", "__main__.py")
"""The pipeline is the top of the library: only the entry points drive it (the command line, the
`pinchpoint.profile()` object, `python -m pinchpoint`). The layers it drives (ingest, analysis,
diagnosis, report, history, compare) never call back up into it."""


def test_only_the_entry_points_import_the_pipeline() -> None:
    others = [p for p in MODULES if not _rel(p).startswith(PIPELINE_USERS)]
    assert _offenders(others, ("pinchpoint.pipeline",)) == []


def test_the_pipeline_imports_no_entry_point() -> None:
    """pipeline/ is driven by cli/ and notebook.py, never the other way; it reads what capture/ wrote
    (through ingest/) but never imports capture/."""
    pipeline = [p for p in MODULES if _rel(p).startswith("pipeline/")]
    assert pipeline
    forbidden = ("pinchpoint.cli", "pinchpoint.notebook", "pinchpoint.__main__", "pinchpoint.capture")
    assert _offenders(pipeline, forbidden) == []


def _outside(
    layer: str, allowed: tuple[str, ...], known: dict[tuple[str, str], str] | None = None
) -> list[str]:
    """Every import of a pinchpoint module outside `allowed` made by a module of `layer`, but for the
    `known` (module, imported module) pairs."""
    paths = [p for p in MODULES if _rel(p).startswith(layer)]
    assert paths, layer
    return [
        f"{_rel(p)}:{line} imports {name}"
        for p in paths
        for name, line in imports(p)
        if _under(name, "pinchpoint")
        and not any(_under(name, a) for a in allowed)
        and not any(_rel(p) == mod and _under(name, target) for mod, target in known or {})
    ]


@pytest.mark.parametrize(
    ("layer", "allowed"),
    [
        ("compare/", ("pinchpoint.compare", "pinchpoint.stats", "pinchpoint.errors", *REPORT_TYPES)),
        ("history/", ("pinchpoint.history", "pinchpoint.compare", "pinchpoint.errors")),
    ],
)
def test_compare_and_history_stand_alone(layer: str, allowed: tuple[str, ...]) -> None:
    """compare/ and history/ work on what reports already say (the typed report.json, step times): no
    cli/, pipeline/, capture/ or notebook, nor ingest/analysis/diagnosis, and of report/ only the
    document types (`REPORT_TYPES`), none of its builders or renderers. history/ is the run
    database (it may use compare's types); making a report for a run that has none, when a run is
    named on the command line, is `pipeline/resolve.py`'s."""
    assert _outside(layer, allowed) == []


CAPTURE_ALLOWED = ("pinchpoint.capture", "pinchpoint.trace", "pinchpoint.errors", "pinchpoint._version")
KNOWN_CAPTURE_IMPORTS: dict[tuple[str, str], str] = {}
"""(module, imported module) pairs capture/ still has outside CAPTURE_ALLOWED: each must go."""


def test_capture_imports_only_capture_trace_and_errors() -> None:
    """capture/ runs inside the user's program: it imports no pinchpoint package above it (the report,
    the pipeline, the notebook object), only its own modules, the trace types, errors and the version
    (`_version.py`, not the package root, whose `profile()` imports the notebook layer)."""
    assert _outside("capture/", CAPTURE_ALLOWED, KNOWN_CAPTURE_IMPORTS) == []


def test_known_capture_imports_are_still_made() -> None:
    made = {(_rel(p), n) for p in MODULES for n, _ in imports(p)}
    assert set(KNOWN_CAPTURE_IMPORTS) <= made


def test_report_does_not_import_cli() -> None:
    report = [p for p in MODULES if _rel(p).startswith("report/")]
    assert _offenders(report, ("pinchpoint.cli",)) == []


def test_trace_imports_no_other_pinchpoint_package() -> None:
    trace = [p for p in MODULES if _rel(p).startswith("trace/")]
    assert trace
    found = [
        f"{_rel(p)}:{line} imports {name}"
        for p in trace
        for name, line in imports(p)
        if _under(name, "pinchpoint") and not _under(name, "pinchpoint.trace")
    ]
    assert found == []


def test_stats_imports_no_other_pinchpoint_package() -> None:
    """stats/ is numbers in, numbers out: every layer may read it because it reads none."""
    found = [
        f"{_rel(p)}:{line} imports {name}"
        for p in MODULES
        if _rel(p).startswith("stats/")
        for name, line in imports(p)
        if _under(name, "pinchpoint") and not _under(name, "pinchpoint.stats")
    ]
    assert [p for p in MODULES if _rel(p).startswith("stats/")] and found == []


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("ingest/", ("pinchpoint.analysis", "pinchpoint.diagnosis", "pinchpoint.capture")),
        ("analysis/", ("pinchpoint.ingest", "pinchpoint.diagnosis", "pinchpoint.capture")),
        ("diagnosis/", ("pinchpoint.ingest", "pinchpoint.capture")),
    ],
)
def test_imports_point_toward_trace(layer: str, forbidden: tuple[str, ...]) -> None:
    assert _offenders([p for p in MODULES if _rel(p).startswith(layer)], forbidden) == []


def test_importing_everything_after_capture_leaves_torch_out() -> None:
    names = ["pinchpoint"] + [
        _module_name(p)
        for p in MODULES
        if _rel(p).split("/")[0]
        in ("analysis", "diagnosis", "report", "ingest", "trace", "cli", "pipeline", "compare", "history")
    ]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, id=_rel(p), marks=pytest.mark.xfail(strict=True, reason=KNOWN_OVERSIZE[_rel(p)]))
        if _rel(p) in KNOWN_OVERSIZE
        else pytest.param(p, id=_rel(p))
        for p in MODULES
    ],
)
def test_module_is_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines < MAX_LINES, f"{_rel(path)} has {lines} lines (limit {MAX_LINES}): split it"


def test_known_oversize_entries_exist() -> None:
    rels = {_rel(p) for p in MODULES}
    assert set(KNOWN_OVERSIZE) <= rels


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module an imported name lives in: itself, else the longest enclosing module
    (`pinchpoint.trace.run.Run` -> `pinchpoint.trace.run`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def type_only_lines(source: str) -> set[int]:
    """Line numbers inside `if TYPE_CHECKING:` blocks: imports there name types for annotations and
    never run, so a module may refer to the type of what calls it (the agent's state) without a cycle."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                lines.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return lines


def import_graph(*, type_only: bool = True) -> dict[str, set[str]]:
    """pinchpoint module -> the pinchpoint modules it imports, at the top or inside functions (a
    package's `__init__` counts only when an import names it, not as every submodule's parent);
    type-only imports (`if TYPE_CHECKING:`) count unless `type_only` is False (a module that names the
    type of what calls it is tied to it as much as one that imports it)."""
    modules = {_module_name(p): p for p in MODULES}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        typed = type_only_lines(path.read_text())
        for name, line in imports(path):
            if line in typed and not type_only:
                continue
            target = _resolve(name, set(modules)) if _under(name, "pinchpoint") else None
            if target is not None and target != m:
                graph[m].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp: set[str] = set()
                while True:
                    u = stack.pop()
                    on_stack.discard(u)
                    comp.add(u)
                    if u == v:
                        break
                out.append(comp)
    return out


def _cycle(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One import cycle through a component, as a path that returns to its start."""
    start = min(comp)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first inside the component: the shortest way back to `start`
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & comp):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return [start]


def test_strongly_connected_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    comps = strongly_connected(graph)
    assert {"a", "b", "c"} in comps and {"d"} in comps and {"e"} in comps
    assert _cycle(graph, {"a", "b", "c"}) == ["a", "b", "c", "a"]


def test_the_package_has_no_import_cycle() -> None:
    """No pinchpoint module imports itself through others, counting imports inside functions and
    type-only imports too (a function-level import hides a cycle from Python, not from the reader; the
    agent's hooks name what they need of it as protocols instead of importing its class)."""
    graph = import_graph()
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(_cycle(graph, c)) for c in cycles)


def test_type_only_imports_are_told_apart() -> None:
    source = "from typing import TYPE_CHECKING\nimport a\nif TYPE_CHECKING:\n    import b\n    import c\nimport d\n"
    assert type_only_lines(source) == {4, 5}


MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{_rel(path)}:{node.lineno} {node.name} ({n} lines)")
    assert long == [], long
