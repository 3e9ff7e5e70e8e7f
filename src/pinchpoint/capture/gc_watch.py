"""Python's garbage collector, counted and timed: every collection through `gc.callbacks`, and every
explicit `gc.collect()` by the line that called it.

A full collection walks every object the program holds; after the imports of a large library that is
millions, and a training loop that calls `gc.collect()` at each epoch end stalls ~150 ms each time (a
knowledge-graph library did, one step in seven). The callback costs two clock reads per collection;
the wrapper around `gc.collect` one frame lookup per call. Both are put back on detach
(`capture/patches.py`). Standard library only.
"""

from __future__ import annotations

import functools
import gc
import sys
import time
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic

FILE = "gc.json"
SITES_MAX = 32
"""Distinct `gc.collect()` call sites kept (a program has a few)."""


class GcWatch:
    """Cumulative counters of this process's collections; `explicit` maps a call site to its calls."""

    def __init__(self) -> None:
        self.ns = 0
        """Time inside collections, all generations, all threads."""
        self.collections = 0
        self.full = 0
        """Collections of the oldest generation (2): the ones that walk every tracked object."""
        self.explicit_ns = 0
        """Time inside `gc.collect()` calls the program made (part of `ns`)."""
        self.explicit: dict[tuple[str, int, str], list[int]] = {}
        """(file, line, function) of a `gc.collect()` caller -> [calls, ns]."""
        self._t0 = 0
        self._installed = False

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        if self._t0:
            self.ns += time.perf_counter_ns() - self._t0
            self._t0 = 0
        self.collections += 1
        if info.get("generation") == 2:
            self.full += 1

    def install(self, patches: Any) -> None:
        """Count collections from now on and wrap `gc.collect`; once per process."""
        if self._installed:
            return
        self._installed = True
        gc.callbacks.append(self.callback)
        patches.handle(_Callback(self.callback))
        patches.set(gc, "collect", self.wrap(gc.collect))

    def wrap(self, collect: Any) -> Any:
        watch = self

        @functools.wraps(collect)
        def collect_noted(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return collect(*args, **kwargs)
            finally:
                took = time.perf_counter_ns() - t0
                watch.explicit_ns += took
                try:
                    f = sys._getframe(1)
                    site = (f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                except ValueError:
                    site = ("?", 0, "?")
                seen = watch.explicit.get(site)
                if seen is not None:
                    seen[0] += 1
                    seen[1] += took
                elif len(watch.explicit) < SITES_MAX:
                    watch.explicit[site] = [1, took]

        return collect_noted

    def write(self, rank_dir: Path) -> None:
        """`gc.json`: the totals, the thresholds and frozen objects now, and each explicit call site."""
        doc = {
            "ns": self.ns,
            "collections": self.collections,
            "full": self.full,
            "explicit_ns": self.explicit_ns,
            "threshold": list(gc.get_threshold()),
            "frozen": gc.get_freeze_count(),
            "explicit": [
                {"file": file, "line": line, "function": func, "calls": calls, "ns": ns}
                for (file, line, func), (calls, ns) in sorted(self.explicit.items(), key=lambda kv: -kv[1][1])
            ],
        }
        write_json_atomic(rank_dir / FILE, doc)


class _Callback:
    """A removable handle for a `gc.callbacks` entry."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def remove(self) -> None:
        if self.fn in gc.callbacks:
            gc.callbacks.remove(self.fn)


WATCH = GcWatch()
"""This process's watch (forked children inherit its counts; their steps read differences)."""
