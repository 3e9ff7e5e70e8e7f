"""torch.compile's compilations as the program's dynamo recorded them (`compile.json`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Compilation:
    """One compilation of a frame (forward; a backward graph compiled lazily has no frame)."""

    compile_id: str
    """Dynamo's id, `FRAME/NTH`: `0/3` is frame 0's fourth compilation (its third recompile)."""
    frame: str | None
    site: str | None
    """The frame's file:line."""
    start_ns: int
    """On the steps' monotonic clock."""
    dur_ns: int
    recompile_reason: str | None = None
    """The guard that failed ("tensor 'args[0]' size mismatch at index 0. expected 32, actual 40")."""
    fail_reason: str | None = None
    """Its first line, where dynamo gave up (the recompile limit: the frame runs eagerly from then on)."""
    graph_breaks: int | None = None
    restart_reasons: tuple[str, ...] = ()
    """Why dynamo restarted tracing this frame: the graph breaks it met, their first lines."""
    backend_ns: int | None = None
    """Of `dur_ns`, the backend: AOTAutograd and inductor's code generation and C++ or Triton compiles
    (what a cache hit replaces with a load)."""
    cache_hits: int = 0
    """Inductor's and AOTAutograd's local cache hits in this compilation."""
    cache_misses: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileCaches:
    """The compiler's caches as the program left them."""

    on: bool | None
    """Inductor's FX-graph cache or AOTAutograd's was on (None: not known)."""
    directory: str | None
    """Where they live (`TORCHINDUCTOR_CACHE_DIR`, else inductor's default under /tmp)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileRecord:
    compilations: tuple[Compilation, ...]
    recompile_limit: int | None = None
    graph_breaks: tuple[tuple[str, int], ...] = ()
    """Graph-break reason -> times dynamo broke a graph for it (its counters)."""
    caches: CompileCaches | None = None
