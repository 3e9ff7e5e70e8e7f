"""torch.compile's graphs, counted and timed as they run: how many a step enters, and how long it spends
inside them (the rest of a compiled step is Python, guards and eager code between graphs).

Inductor runs every graph it compiled, forward and backward, through `CompiledFxGraph.__call__`
(torch 2.10-2.13). The wrapper costs two clock reads a call. It is put in only when inductor's module
is imported (a meta-path finder waits for it), so a program that never compiles pays nothing, and is
put back on detach (`capture/patches.py`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import sys
import time
from types import ModuleType
from typing import Any

MODULE = "torch._inductor.output_code"
CLASS = "CompiledFxGraph"


class GraphWatch:
    """Cumulative counters of this process's compiled-graph calls (all threads)."""

    def __init__(self) -> None:
        self.calls = 0
        self.ns = 0
        """Time inside compiled graphs."""
        self._patches: Any = None

    def install(self, patches: Any) -> None:
        """Wrap the graphs' call now if inductor is loaded, else when it is; once per process."""
        if self._patches is not None:
            return
        self._patches = patches
        module = sys.modules.get(MODULE)
        if module is not None:
            self.wrap_module(module)
            return
        finder = _Finder(self)
        sys.meta_path.insert(0, finder)
        patches.handle(finder)

    def wrap_module(self, module: ModuleType) -> None:
        cls = getattr(module, CLASS, None)
        call = vars(cls).get("__call__") if isinstance(cls, type) else None
        if call is None or getattr(call, "_pinchpoint", False):
            return
        self._patches.set(cls, "__call__", self.wrap(call))

    def wrap(self, call: Any) -> Any:
        watch = self
        clock = time.perf_counter_ns

        @functools.wraps(call)
        def call_timed(graph: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return call(graph, *args, **kwargs)
            finally:
                watch.ns += clock() - t0
                watch.calls += 1

        call_timed._pinchpoint = True  # type: ignore[attr-defined]
        return call_timed


class _Finder(importlib.abc.MetaPathFinder):
    """Waits for inductor's output-code module and wraps its graphs once it has executed."""

    def __init__(self, watch: GraphWatch) -> None:
        self.watch = watch

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        self.remove()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        orig_exec = getattr(loader, "exec_module")  # noqa: B009
        watch = self.watch

        def exec_module(module: ModuleType) -> None:
            orig_exec(module)
            with contextlib.suppress(Exception):  # never break the program's compile
                watch.wrap_module(module)

        setattr(loader, "exec_module", exec_module)  # noqa: B010
        return spec

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


WATCH = GraphWatch()
"""This process's watch (forked children inherit its counts; their steps read differences)."""
