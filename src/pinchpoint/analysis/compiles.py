"""What torch.compile cost the run: its compilations grouped by dynamo's compile id (a forward graph and
the backward graph compiled for it share one), the recompiles among them with the guard that failed,
and the dimension that varied."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from pinchpoint.trace.compiles import Compilation, CompileRecord

SIZE_GUARD = re.compile(r"tensor '([^']+)' size mismatch at index (\d+)\. expected (\d+), actual (\d+)")
LIMIT = "recompile limit"
"""In dynamo's failure text where a frame hit `torch._dynamo.config.recompile_limit`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Varying:
    """A tensor dimension whose size changed from call to call (each change a recompile)."""

    tensor: str
    dim: int
    sizes: tuple[int, ...]
    """The sizes the guards saw, in order of first sight."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileStats:
    compile_ns: int
    """Every compilation, forward and backward."""
    compiles: int
    """Compile ids (a frame's forward with its backward counts once)."""
    recompiles: int
    recompile_ns: int
    """The compilations past each frame's first: what static shapes that vary cost."""
    mean_recompile_ns: float
    """A recompile's mean time (forward and backward): what one more compilation, of a dynamic graph,
    costs (the first compilation also pays the compiler's one-time set-up: 13.5 s against ~2.5 s for
    each recompile's forward, examples/compile_recompiles.py)."""
    frame: str | None
    """The frame that recompiled most, as `name (file:line)`."""
    reasons: tuple[str, ...]
    """The recompiles' guard failures, first ones first (deduplicated)."""
    varying: tuple[Varying, ...] = ()
    limit_hit: bool = False
    """A frame hit the recompile limit: from then on it runs eagerly on shapes it has not seen."""
    recompile_limit: int | None = None


def compile_stats(record: CompileRecord | None) -> CompileStats | None:
    """None without a compilation."""
    if record is None or not record.compilations:
        return None
    by_id: dict[str, list[Compilation]] = defaultdict(list)
    for c in record.compilations:
        by_id[c.compile_id].append(c)
    ran = {k: v for k, v in by_id.items() if any(c.fail_reason is None for c in v)}
    again = {k: v for k, v in ran.items() if _nth(k) > 0}
    forwards = [c for v in again.values() for c in v if c.frame is not None]
    reasons = list(dict.fromkeys(c.recompile_reason for c in forwards if c.recompile_reason))
    counts: dict[str, int] = defaultdict(int)
    for c in forwards:
        counts[_label(c)] += 1
    return CompileStats(
        compile_ns=sum(c.dur_ns for c in record.compilations),
        compiles=len(ran),
        recompiles=len(again),
        recompile_ns=sum(c.dur_ns for v in again.values() for c in v),
        mean_recompile_ns=sum(c.dur_ns for v in again.values() for c in v) / max(1, len(again)),
        frame=max(counts, key=lambda k: counts[k]) if counts else None,
        reasons=tuple(reasons[:5]),
        varying=_varying(reasons),
        limit_hit=any(c.fail_reason and LIMIT in c.fail_reason.lower() for c in record.compilations),
        recompile_limit=record.recompile_limit,
    )


OWN = "/pinchpoint/capture/"
"""A frame of pinchpoint's own: its wrapper of `Module.__call__`, which a compiled module's call enters."""


def _label(c: Compilation) -> str:
    if c.site and OWN in c.site:
        return "the compiled module's call"
    return f"{c.frame} ({c.site})" if c.site else str(c.frame)


def _nth(compile_id: str) -> int:
    """`0/3` -> 3 (frame 0's fourth compilation); 0 where the id does not read so."""
    tail = compile_id.rpartition("/")[2]
    return int(tail) if tail.isdigit() else 0


def _varying(reasons: list[str]) -> tuple[Varying, ...]:
    sizes: dict[tuple[str, int], list[int]] = defaultdict(list)
    for reason in reasons:
        for m in SIZE_GUARD.finditer(reason):
            seen = sizes[(m.group(1), int(m.group(2)))]
            for v in (int(m.group(3)), int(m.group(4))):
                if v not in seen:
                    seen.append(v)
    return tuple(
        Varying(tensor=t, dim=d, sizes=tuple(v))
        for (t, d), v in sorted(sizes.items(), key=lambda kv: -len(kv[1]))
    )
