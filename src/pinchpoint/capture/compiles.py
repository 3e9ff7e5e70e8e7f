"""torch.compile's own record of what it compiled, written at the program's end (`compile.json`).

Dynamo keeps a metrics record per compilation (`torch._dynamo.utils.get_compilation_metrics()`, torch
2.10-2.13): the frame, when it started and how long it took, why it recompiled (the guard that failed:
"tensor 'args[0]' size mismatch at index 0. expected 32, actual 40"), graph breaks, and a failure such as
the recompile limit (after which the frame runs eagerly). Reading it once at the end costs nothing while
the program runs, and a program that never imported dynamo pays nothing at all.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic

FILE = "compile.json"
REASON_MAX = 400
"""Characters kept of a reason (dynamo's failure texts run to a page of hints)."""


def write_compiles(rank_dir: Path) -> None:
    """`compile.json` where dynamo compiled anything in this process; nothing otherwise."""
    if "torch._dynamo" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        doc = compiles_doc()
        if doc is not None:
            write_json_atomic(rank_dir / FILE, doc)


def compiles_doc() -> dict[str, Any] | None:
    """The compilations dynamo recorded, with the clock pair that maps their wall-clock starts onto the
    steps' monotonic clock; None where there were none."""
    dynamo = sys.modules.get("torch._dynamo")
    utils = sys.modules.get("torch._dynamo.utils")
    if dynamo is None or utils is None:
        return None
    metrics = list(utils.get_compilation_metrics())
    if not metrics:
        return None
    breaks = utils.counters.get("graph_break", {}) if hasattr(utils, "counters") else {}
    return {
        "clock": {"wall_time_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()},
        "recompile_limit": _int(getattr(dynamo.config, "recompile_limit", None)),
        "compiles": [_compile(m) for m in metrics],
        "graph_breaks": {str(k)[:REASON_MAX]: int(v) for k, v in dict(breaks).items()},
        "caches": _caches(),
    }


def _caches() -> dict[str, Any]:
    """Whether inductor's and AOTAutograd's local caches were on, and where they live (a directory in
    /tmp by default: a container or a CI job that starts afresh compiles everything again)."""
    out: dict[str, Any] = {"fx_graph": None, "autograd": None, "force_disabled": None, "dir": None}
    inductor = sys.modules.get("torch._inductor.config")
    functorch = sys.modules.get("torch._functorch.config")
    with contextlib.suppress(Exception):
        out["fx_graph"] = bool(inductor.fx_graph_cache) if inductor is not None else None
        out["force_disabled"] = bool(inductor.force_disable_caches) if inductor is not None else None
    with contextlib.suppress(Exception):
        out["autograd"] = bool(functorch.enable_autograd_cache) if functorch is not None else None
    dirs = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    with contextlib.suppress(Exception):
        if dirs is not None:  # (not `cache_dir()`: it sets the variable and makes the directory)
            out["dir"] = os.path.abspath(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or dirs.default_cache_dir())
    return out


def _compile(m: Any) -> dict[str, Any]:
    fail = getattr(m, "fail_reason", None)
    return {
        "id": getattr(m, "compile_id", None),
        "frame": getattr(m, "co_name", None),
        "file": getattr(m, "co_filename", None),
        "line": _int(getattr(m, "co_firstlineno", None)),
        "start_us": _int(getattr(m, "start_time_us", None)),
        "duration_us": _int(getattr(m, "duration_us", None)),
        "recompile_reason": _text(getattr(m, "recompile_reason", None)),
        "fail_reason": _text(fail.splitlines()[0] if isinstance(fail, str) and fail else None),
        "graph_breaks": _int(getattr(m, "num_graph_breaks", None)),
        "graph_ops": _int(getattr(m, "graph_op_count", None)),
        "restart_reasons": _reasons(getattr(m, "restart_reasons", None)),
        # where the time went: dynamo's tracing, then the backend (AOTAutograd, inductor's codegen and
        # C++/Triton compiles), which a cache hit skips
        "dynamo_us": _int(getattr(m, "dynamo_cumulative_compile_time_us", None)),
        "backend_us": _us(getattr(m, "backend_compile_time_s", None)),
        "inductor_us": _int(getattr(m, "inductor_cumulative_compile_time_us", None)),
        "cache": {
            name: _int(getattr(m, attr, None))
            for name, attr in (
                ("fx_hit", "inductor_fx_local_cache_hit_count"),
                ("fx_miss", "inductor_fx_local_cache_miss_count"),
                ("aot_hit", "aotautograd_local_cache_hit_count"),
                ("aot_miss", "aotautograd_local_cache_miss_count"),
            )
        },
    }


def _us(seconds: Any) -> int | None:
    return round(seconds * 1e6) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else None


def _reasons(v: Any) -> list[str]:
    """Why dynamo restarted tracing the frame (a graph break's first line: "Unsupported Tensor.item()
    call ..."), deduplicated."""
    if not isinstance(v, (set, list, tuple)):
        return []
    return sorted({str(r).strip().splitlines()[0][:REASON_MAX] for r in v if str(r).strip()})[:8]


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _text(v: Any) -> str | None:
    return str(v)[:REASON_MAX] if v else None
