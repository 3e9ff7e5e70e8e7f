"""What one call of a served model costs at batch 1, 2, 4, ...: measured on the server's own model and
input, once its load is over (`run --load` asks for it with `served_calls.SERVED_ENV`).

The first top-level inference call whose first argument is a tensor is kept (the module and that call's
arguments: a request's input, small). The module is held until exit: a server's model is often a local of
the function that built its app, reachable at `atexit` only through garbage not yet collected. At exit — after the load, once the server stopped taking
requests — the call is replayed with every tensor argument that had the call's batch as its first
dimension repeated to batch b, in the grad mode the call ran in, for b = 1, 2, 4, ... `MAX_BATCH`: a
warm-up call, then the median of up to `REPS` timed calls. It stops early when one call takes longer
than `SLOW_CALL_S` or the probe has spent `BUDGET_S` (a server is stopped within its grace time).
Written to ranks/rankR/batch_probe.json: {"rows": the kept call's batch, "batches": [[b, ms], ...],
"start_ns", "end_ns"} (the probe's own time, which the run's wall clock counts as pinchpoint's).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.replay import ExitReplay, KeptCall

FILE = "batch_probe.json"
MAX_BATCH = 64
REPS = 7
BUDGET_S = 2.0
SLOW_CALL_S = 0.5


class BatchProbe(ExitReplay):
    FILE = FILE

    def __init__(self, rank_dir: Callable[[], Path], quiet: Callable[[bool], None]) -> None:
        super().__init__(rank_dir, quiet)
        self.rows = 0
        """The kept call's batch."""

    def note(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], torch: Any) -> None:
        """A top-level call outside training: the first with a batched tensor is kept (later ones cost one
        attribute check)."""
        if self.kept is not None or not args:
            return
        try:
            rows = int(args[0].shape[0]) if args[0].dim() >= 1 else 0
        except Exception:
            return
        if rows < 1:
            return
        self.rows = rows
        self.keep(KeptCall.of(module, args, kwargs, torch), torch)  # (held: see the module's doc)

    def measure(self, call: KeptCall, torch: Any, found: dict[str, Any]) -> None:
        """[batch, median ms] into found["batches"] as each batch is measured (a later failure keeps them)."""
        found["batches"] = out = []
        deadline = time.perf_counter() + BUDGET_S
        b = rows = self.rows
        while b <= MAX_BATCH and time.perf_counter() < deadline:
            a = tuple(_batched(x, rows, b, torch) for x in call.args)
            kw = {k: _batched(v, rows, b, torch) for k, v in call.kwargs.items()}
            try:
                call.module(*a, **kw)  # warm-up (its allocations, oneDNN's primitives for the shape)
                times: list[float] = []
                while len(times) < REPS and time.perf_counter() < deadline:
                    t0 = time.perf_counter()
                    call.module(*a, **kw)
                    times.append(time.perf_counter() - t0)
            except Exception:  # (a model that refuses a larger batch)
                break
            if not times:
                break  # (the budget ran out after the warm-up)
            ms = statistics.median(times) * 1e3
            out.append([b, round(ms, 4)])
            if ms / 1e3 > SLOW_CALL_S:
                break
            b *= 2

    def document(self, found: dict[str, Any]) -> dict[str, Any] | None:
        return {"rows": self.rows, "batches": found["batches"]} if found.get("batches") else None


def _batched(x: Any, rows: int, b: int, torch: Any) -> Any:
    """A tensor whose first dimension is the call's batch, repeated to `b` rows (whole copies of the
    call's rows, then cut); anything else as it was."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1 or int(x.shape[0]) != rows or b == rows:
        return x
    copies = -(-b // rows)
    return x.repeat(copies, *([1] * (x.dim() - 1)))[:b]
