"""host.gc (Python's garbage collector) in words."""

from __future__ import annotations

import os
from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct


def _whose(own: bool) -> str:
    return "the program's own code" if own else "a library's code"


PHRASES: dict[str, Callable[..., str]] = {
    "host.gc.time": lambda share, per_step_ns, collections, full: (
        f"Garbage collections take {pct(share)} of the steps ({ms(per_step_ns)} a step on average): "
        f"{collections:.2f} collections a step, {full:.2f} of them full (every tracked object walked)"
    ),
    "host.gc.stalls": lambda steps, of, every, stall_ns, median_ns: (
        f"They come as stalls: {steps} of {of} steps spent {ms(stall_ns)} collecting (median), against a "
        f"median step of {ms(median_ns)}" + (f"; one every {every} steps" if every else "")
    ),
    "host.gc.site": lambda file, line, function, calls, ns, own: (
        f"gc.collect() called {calls} time(s) from {os.path.basename(file)}:{line} in {function}() "
        f"({_whose(own)}: {file}), {ms(ns / max(1, calls))} per call"
    ),
    "host.gc.frozen": lambda objects: f"gc.freeze() already holds {objects:,} objects out of collections",
    "host.gc.fix_explicit": lambda file, line, function, own: (
        f"Drop the gc.collect() at {file}:{line} ({function}) or call it far less often: CPython collects "
        "on its own. Where the call must stay"
        + ("" if own else " (it is a library's: its option, or a patch)")
        + ", call gc.freeze() once after start-up (imports, data and model built): collections then "
        "skip everything made until then, and each call is cheap."
    ),
    "host.gc.fix_automatic": lambda frozen: (
        "Call gc.freeze() once after start-up (imports, data and model built): full collections then skip "
        "everything made until then. For a loop that allocates many short-lived containers, a larger "
        "first threshold (gc.set_threshold(50_000, 20, 100)) collects less often."
        + (
            " Some objects are frozen already: freeze again after the data and model are built."
            if frozen
            else ""
        )
    ),
    "host.gc.snippet": lambda: (
        "import gc\n"
        "# ... imports, dataset, model and optimizer built ...\n"
        "gc.collect()  # once, before freezing\n"
        "gc.freeze()"
    ),
}
