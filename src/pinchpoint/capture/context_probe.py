"""What a generation loop's model call would cost with a KV cache: the program's own call replayed at exit
with its whole context and with its last token alone.

A loop without a cache passes the whole sequence so far each call (the ids grow by one, the next-to-last
id an earlier call's last: `hooks._tokens`, CPU tensors only; a server's streams may take turns). Once a
run of `RUN` such calls came, its latest one is kept (`replay.KeptCall`: the module and that call's
arguments, token ids, small). The module is held until exit: a sampler's model is usually a local of its
`main()`, gone by the time `atexit` runs (so a CPU model the program dropped earlier is freed at exit
instead). At exit the call is replayed, in the grad mode it
ran in, alternately as it was and with every tensor argument whose second dimension was the call's length
cut to its last position — a one-token call: what each call after the prompt runs with a cache, less the
attention over the cached keys. A fitted line cannot say this: a one-token call takes another kernel path
(a 1 × T context of a small GPT costs 0.9 ms at T = 1 and 1.4-1.8 ms from T = 2 to 71 here).

A warm-up of each, then pairs until `REPS` or `BUDGET_S`; nothing when one warm-up call takes longer
than `SLOW_CALL_S`. Written to ranks/rankR/context_probe.json: {"tokens": the call's length, "full_ms",
"one_ms" (medians), "pairs", "start_ns", "end_ns"} (the probe's own time: pinchpoint's, not the program's).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.replay import ExitReplay, KeptCall

FILE = "context_probe.json"
RUN = 8
"""Calls in a row, each the previous one's ids plus one, before one is kept (`analysis/generation.MIN_RUN`)."""
OPEN_RUNS = 256
"""Runs followed at once (a server's streams in flight), the oldest dropped beyond."""
REPS = 7
BUDGET_S = 0.3
SLOW_CALL_S = 0.1


class ContextProbe(ExitReplay):
    FILE = FILE

    def __init__(self, rank_dir: Callable[[], Path], quiet: Callable[[bool], None]) -> None:
        super().__init__(rank_dir, quiet)
        self.tokens = 0
        """The kept call's length."""
        self._ends: dict[tuple[int, int], int] = {}
        """(length, last id) of each open run's latest call -> the run's calls (streams take turns on a server)."""

    def note(
        self,
        module: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        tokens: int,
        tail: tuple[int, int],
        torch: Any,
    ) -> None:
        """A top-level call with gradients off whose ids were read (`tail`: its first row's last two)."""
        if self.kept is not None:
            return
        ends = self._ends
        run = ends.pop((tokens - 1, tail[0]), 0) + 1
        if run < RUN:
            if len(ends) >= OPEN_RUNS:
                del ends[next(iter(ends))]  # (the oldest)
            ends[(tokens, tail[1])] = run
            return
        ends.clear()
        self.tokens = tokens
        self.keep(KeptCall.of(module, args, kwargs, torch), torch)

    def measure(self, call: KeptCall, torch: Any, found: dict[str, Any]) -> None:
        full: list[float] = []
        one: list[float] = []
        found.update(full=full, one=one)
        _pairs(full, one, call, _cut(call.args, call.kwargs, self.tokens, torch))

    def document(self, found: dict[str, Any]) -> dict[str, Any] | None:
        full, one = found.get("full"), found.get("one")
        if not full or not one:
            return None
        return {
            "tokens": self.tokens,
            "full_ms": round(statistics.median(full) * 1e3, 4),
            "one_ms": round(statistics.median(one) * 1e3, 4),
            "pairs": min(len(full), len(one)),
        }


def _pairs(
    full: list[float], one: list[float], call: KeptCall, cut: tuple[tuple[Any, ...], dict[str, Any]]
) -> None:
    """Appends the seconds of each timed call, the whole context's to `full` and the last token's to `one`,
    alternating (a machine that slows meanwhile slows both)."""
    module = call.module
    deadline = time.perf_counter() + BUDGET_S
    for a, kw in ((call.args, call.kwargs), cut):  # warm-ups (oneDNN's primitives for each shape)
        t0 = time.perf_counter()
        module(*a, **kw)
        if time.perf_counter() - t0 > SLOW_CALL_S:
            return
    while len(one) < REPS and time.perf_counter() < deadline:
        for a, kw, out in ((call.args, call.kwargs, full), (*cut, one)):
            t0 = time.perf_counter()
            module(*a, **kw)
            out.append(time.perf_counter() - t0)


def _cut(
    args: tuple[Any, ...], kwargs: dict[str, Any], tokens: int, torch: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with each tensor of the call's length (second dimension) cut to its last
    position: the ids, an attention mask beside them; anything else as it was."""

    def last(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dim() >= 2 and int(x.shape[1]) == tokens:
            return x[:, -1:]
        return x

    return tuple(last(x) for x in args), {k: last(v) for k, v in kwargs.items()}
