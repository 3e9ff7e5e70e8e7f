"""torch.compile's graphs, counted and timed as they run: how many a step enters, and how long it spends
inside them (the rest of a compiled step is Python, guards and eager code between graphs).

Inductor runs every graph it compiled, forward and backward, through `CompiledFxGraph.__call__`
(torch 2.10-2.13). The wrapper costs two clock reads a call. It is put in only when inductor's module
is imported (`import_hook.when_imported` waits for it), so a program that never compiles pays nothing,
and is put back on detach (`capture/patches.py`).
"""

from __future__ import annotations

import contextlib
import functools
import time
from types import ModuleType
from typing import Any

from pinchpoint.capture.import_hook import when_imported

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
        when_imported(MODULE, self._wrap_quietly, patches)

    def _wrap_quietly(self, module: ModuleType) -> None:
        with contextlib.suppress(Exception):  # never break the program's compile
            self.wrap_module(module)

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


DYNAMO = "torch._dynamo.eval_frame"


def skip_in_dynamo(patches: Any, code: Any) -> None:
    """Tell dynamo never to compile `code` as a frame of its own (its callees still are): pinchpoint's
    wrapper of `Module.__call__` is not torch's, so where a compiled program's modules ran eagerly
    (after a graph break) dynamo compiled the wrapper once per module class (~60 ms each, guarded on
    the class) — compilations the program does not have without pinchpoint. Inside a traced frame the
    wrapper is still inlined (skipping a code object does not change inlining). Done when dynamo's
    module is imported, or now if it is."""
    when_imported(DYNAMO, functools.partial(_skip_quietly, code), patches)


def _skip_quietly(code: Any, module: ModuleType) -> None:
    with contextlib.suppress(Exception):  # torch without it: the compilations stay, nothing breaks
        module.skip_code(code)


WATCH = GraphWatch()
"""This process's watch (forked children inherit its counts; their steps read differences)."""
