"""Reads PyTorch profiler (Kineto) Chrome-trace files, `.json` or `.json.gz`, into a `KinetoTrace`.

Streaming and columnar (decision 10): the text is decoded block by block (`kineto_stream`), each block's
events go straight into numpy column chunks (`kineto_columns`), and no per-event object outlives its
block. Times become integer nanoseconds exactly (`to_ns`); nothing is rounded to microseconds.

What is kept: complete ("X") events of every category (`KIND_BY_CAT`), `[memory]` instant events, and
the flow ids of launch→GPU arrows (used only when a trace lacks `args.correlation`). Metadata ("M"),
other instants, counters and B/E pairs are skipped (B/E and bad events are counted in the warnings).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from pinchpoint.errors import TraceError
from pinchpoint.ingest.kineto_columns import (
    _NO_ARGS,
    FLOW_CATS,
    LEGACY_ANNOTATION_PREFIXES,
    LEGACY_CATS,
    RawEvent,
    copy_of,
    kind_of,
    to_ints,
    to_ns,
)
from pinchpoint.ingest.kineto_stream import BLOCK_BYTES, DEFAULT_MAX_JSON_BYTES, EventStream, Source
from pinchpoint.trace.kineto import (
    MISSING,
    DeviceInfo,
    EventTable,
    Kind,
    KinetoTrace,
    MemoryTable,
    TraceMeta,
)

__all__ = ["DEFAULT_MAX_JSON_BYTES", "TRACE_PATTERNS", "read_trace", "read_trace_dir"]

TRACE_PATTERNS = ("*.json", "*.json.gz")
"""File names `read_trace_dir` reads (this includes Kineto's `*.pt.trace.json[.gz]`)."""
MAX_NS_US = 9.0e15
"""Stamps at or past this many µs would overflow int64 nanoseconds; such events are skipped."""
_GPU_KINDS = np.array([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.GPU_USER_ANNOTATION], dtype=np.int8)
_LAUNCH_KINDS = np.array([Kind.RUNTIME, Kind.DRIVER, Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET], dtype=np.int8)
_decoder = msgspec.json.Decoder(list[RawEvent])
_one_decoder = msgspec.json.Decoder(RawEvent)
_TORCH_PIN = re.compile(r"^torch==([\w.+-]+)$")


def read_trace(
    path: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    block_bytes: int = BLOCK_BYTES,
) -> KinetoTrace:
    """One rank's trace. `progress(done_bytes, total_bytes)` is called after each block (file bytes).

    Raises TraceError when nothing usable can be read; repairs (skipped events, a truncated tail) become
    `KinetoTrace.warnings`.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path}: is a directory; use read_trace_dir for per-rank traces")
    src = Source(path, max_json_bytes, block_bytes)
    try:
        stream = EventStream(src, _decoder, _one_decoder, progress=progress, block_bytes=block_bytes)
        builder = _Builder()
        for events in stream:
            builder.add(events)
    finally:
        src.close()
    warnings: list[str] = []
    if stream.truncated or src.truncated_gzip:
        if stream.n_events == 0:
            raise TraceError(f"{path}: truncated before the first complete event; nothing to read")
        what = "gzip stream" if src.truncated_gzip else "JSON"
        warnings.append(f"trace truncated after {stream.n_events} events (the {what} ends early)")
    if src.trailing_garbage:
        warnings.append("bytes after the end of the gzip stream were ignored")
    if stream.skipped:
        warnings.append(f"{stream.skipped} trace events with fields of the wrong type were skipped")
    events, memory = builder.finish(warnings)
    meta = _meta(path, stream.meta, builder, src.json_bytes, warnings)
    if stream.n_events == 0:
        warnings.append("the trace has no events")
    return KinetoTrace(meta=meta, events=events, memory=memory, warnings=tuple(warnings))


RENUMBERED = "ranks missing or repeated in distributedInfo; numbered the files in name order"
"""The warning every rank gets when the traces' own rank numbers can't be used."""


def trace_files(path: Path) -> list[Path]:
    """The trace files of a directory of per-rank traces, in name order; TraceError if there are none."""
    path = Path(path)
    if not path.is_dir():
        raise TraceError(f"{path}: not a directory")
    files = sorted({f for pat in TRACE_PATTERNS for f in path.glob(pat) if f.is_file()})
    if not files:
        raise TraceError(f"{path}: no *.json or *.json.gz trace files here")
    return files


def read_trace_dir(
    path: Path,
    *,
    progress: Callable[[int, int], None] | None = None,
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
) -> list[KinetoTrace]:
    """Every trace file in a directory (one per rank), sorted by rank.

    Ranks come from `distributedInfo.rank`; when some are missing or two files claim one rank, all are
    numbered in file-name order and each trace says so in its warnings. Unreadable files are skipped
    with a warning; TraceError if none can be read.
    """
    files = trace_files(path)
    total = sum(f.stat().st_size for f in files)
    traces: list[KinetoTrace] = []
    failed: list[str] = []
    done = 0
    for f in files:
        size = f.stat().st_size

        def one(d: int, _t: int, base: int = done) -> None:
            if progress is not None:
                progress(base + d, total)

        try:
            traces.append(read_trace(f, progress=one, max_json_bytes=max_json_bytes))
        except TraceError as e:
            failed.append(str(e))
        done += size
    if not traces:
        raise TraceError(f"{path}: no readable trace ({failed[0]})")
    extra = [f"skipped an unreadable trace: {msg}" for msg in failed]
    ranks = [t.meta.rank for t in traces]
    if not all(t.meta.rank_known for t in traces) or len(set(ranks)) != len(ranks):
        extra.append(RENUMBERED)
        traces = [
            dataclasses.replace(t, meta=dataclasses.replace(t.meta, rank=i, rank_known=False))
            for i, t in enumerate(traces)
        ]
    if extra:
        traces = [dataclasses.replace(t, warnings=(*t.warnings, *extra)) for t in traces]
    return sorted(traces, key=lambda t: t.meta.rank)


class _Builder:
    """Column chunks, one per decoded block."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.kinds: dict[str, int] = {}
        self.legacy = False
        self.cols: dict[str, list[np.ndarray[Any, Any]]] = {}
        self.mem: dict[str, list[np.ndarray[Any, Any]]] = {}
        self.flow_cols: dict[str, list[np.ndarray[Any, Any]]] = {}
        self.need_flows = False
        """Set by the first block whose launches or GPU events lack `args.correlation`."""
        self.bad_time = 0
        self.negative_dur = 0
        self.begin_end = 0

    def _put(self, table: dict[str, list[np.ndarray[Any, Any]]], **cols: np.ndarray[Any, Any]) -> None:
        for k, v in cols.items():
            table.setdefault(k, []).append(v)

    def add(self, evs: list[RawEvent]) -> None:
        xs = [e for e in evs if e.ph == "X"]
        if xs:
            self._add_complete(xs)
        if len(xs) != len(evs):
            self._add_others([e for e in evs if e.ph != "X"])

    def _add_complete(self, xs: list[RawEvent]) -> None:
        start, ok = to_ns([e.ts for e in xs])
        dur_ns, ok_dur = to_ns([e.dur for e in xs])
        ok &= ok_dur
        nonneg = dur_ns >= 0
        if not bool((ok & nonneg).all()):
            self.bad_time += int((~ok).sum())
            self.negative_dur += int((ok & ~nonneg).sum())
            keep = ok & nonneg
            xs = [e for e, good in zip(xs, keep.tolist(), strict=True) if good]
            start, dur_ns = start[keep], dur_ns[keep]
            if not xs:
                return
        cats = [e.cat for e in xs]
        for c in set(cats).difference(self.kinds):
            self.kinds[c] = int(kind_of(c))
            self.legacy = self.legacy or c.lower() in LEGACY_CATS
        kinds = self.kinds
        names = self.names
        args = [e.args or _NO_ARGS for e in xs]
        ext = to_ints([a.external_id for a in args])
        ext_2021 = to_ints([a.external_id_2021 for a in args])
        kind = np.array([kinds[c] for c in cats], dtype=np.int8)
        corr = to_ints([a.correlation for a in args])
        if not self.need_flows:
            self.need_flows = bool(np.any(np.isin(kind, _LAUNCH_KINDS) & (corr == MISSING)))
        self._put(
            self.cols,
            kind=kind,
            name=np.array([names.setdefault(e.name, len(names)) for e in xs], dtype=np.int32),
            pid=to_ints([e.pid for e in xs]),
            tid=to_ints([e.tid for e in xs]),
            start_ns=start,
            dur_ns=dur_ns,
            correlation=corr,
            external_id=np.where(ext == MISSING, ext_2021, ext),
            device=to_ints([a.device for a in args]),
            stream=to_ints([a.stream for a in args]),
            bytes=to_ints([a.bytes for a in args]),
        )

    def _add_others(self, evs: list[RawEvent]) -> None:
        mem = [e for e in evs if e.name == "[memory]" and e.ph in ("i", "I")]
        if mem:
            t_ns, ok = to_ns([e.ts for e in mem])
            if not bool(ok.all()):
                self.bad_time += int((~ok).sum())
                mem = [e for e, good in zip(mem, ok.tolist(), strict=True) if good]
                t_ns = t_ns[ok]
            args = [e.args or _NO_ARGS for e in mem]
            self._put(
                self.mem,
                t_ns=t_ns,
                bytes_delta=to_ints([a.mem_bytes for a in args]),
                total_allocated=to_ints([a.total_allocated for a in args]),
                total_reserved=to_ints([a.total_reserved for a in args]),
                device_type=to_ints([a.device_type for a in args]).astype(np.int8),
                device_id=to_ints([a.device_id for a in args]).astype(np.int32),
            )
        self.begin_end += sum(1 for e in evs if e.ph in ("B", "E"))
        if self.need_flows:
            flows = [e for e in evs if e.ph in ("s", "f") and e.cat.lower() in FLOW_CATS]
            if flows:
                ts, ok = to_ns([e.ts for e in flows])
                self._put(
                    self.flow_cols,
                    id=to_ints([e.id for e in flows])[ok],
                    pid=to_ints([e.pid for e in flows])[ok],
                    tid=to_ints([e.tid for e in flows])[ok],
                    t_ns=ts[ok],
                )

    def finish(self, warnings: list[str]) -> tuple[EventTable, MemoryTable]:
        if self.bad_time:
            warnings.append(
                f"{self.bad_time} events without a usable ts or dur (missing, not a number, "
                "or past 9e15 µs) were skipped"
            )
        if self.negative_dur:
            warnings.append(f"{self.negative_dur} complete events with a negative dur were skipped")
        if self.begin_end:
            warnings.append(f"{self.begin_end} B/E (begin/end) events were ignored; only X events are read")
        c = {k: np.concatenate(v) for k, v in self.cols.items()}
        self.cols = {}
        if not c:
            from pinchpoint.trace.kineto import empty_events

            c = {f.name: getattr(empty_events(), f.name) for f in dataclasses.fields(EventTable) if f.init}
            c.pop("names")
        names = tuple(self.names)
        kind = c["kind"]
        if self.legacy:
            ids = np.array(
                [i for i, s in enumerate(names) if s.startswith(LEGACY_ANNOTATION_PREFIXES)], np.int32
            )
            kind[(kind == Kind.CPU_OP) & np.isin(c["name"], ids)] = Kind.USER_ANNOTATION
        gpu = np.isin(kind, _GPU_KINDS)
        pid_dev = (c["pid"] >= 0) & (c["pid"] < 1 << 16)
        device = np.where(gpu & (c["device"] == MISSING) & pid_dev, c["pid"], c["device"])
        c["device"] = device.astype(np.int32)
        c["stream"] = np.where(gpu & (c["stream"] == MISSING), c["tid"], c["stream"])
        c["copy_kind"], c["host_memory"] = self._copies(names, kind, c["name"])
        if self.flow_cols:
            self._correlate_by_flows(c)
        order = np.lexsort((-c["dur_ns"], c["start_ns"]))
        for k in list(c):  # one column at a time keeps the peak at one extra column
            c[k] = c[k][order]
        return EventTable(names=names, **c), self._memory()

    def _copies(self, names: tuple[str, ...], kind: Any, name: Any) -> tuple[Any, Any]:
        copy_lut = np.zeros(max(1, len(names)), dtype=np.int8)
        host_lut = np.zeros(max(1, len(names)), dtype=np.int8)
        for i in np.unique(name[kind == Kind.MEMCPY]).tolist():
            copy_lut[i], host_lut[i] = copy_of(names[i])
        is_copy = kind == Kind.MEMCPY
        return np.where(is_copy, copy_lut[name], 0).astype(np.int8), np.where(
            is_copy, host_lut[name], 0
        ).astype(np.int8)

    def _correlate_by_flows(self, c: dict[str, Any]) -> None:
        """Fill missing correlation ids of launches and GPU work from the flow arrows bound to them."""
        need = np.flatnonzero(np.isin(c["kind"], _LAUNCH_KINDS) & (c["correlation"] == MISSING))
        if need.size == 0:
            return
        f = {k: np.concatenate(v) for k, v in self.flow_cols.items()}
        keys = zip(f["pid"].tolist(), f["tid"].tolist(), f["t_ns"].tolist(), strict=True)
        by_start = dict(zip(keys, f["id"].tolist(), strict=True))
        rows = zip(
            c["pid"][need].tolist(), c["tid"][need].tolist(), c["start_ns"][need].tolist(), strict=True
        )
        c["correlation"][need] = [by_start.get(key, MISSING) for key in rows]

    def _memory(self) -> MemoryTable:
        from pinchpoint.trace.kineto import empty_memory

        if not self.mem:
            return empty_memory()
        m = {k: np.concatenate(v) for k, v in self.mem.items()}
        order = np.argsort(m["t_ns"], kind="stable")
        return MemoryTable(**{k: v[order] for k, v in m.items()})


def _meta(path: Path, raw: dict[str, Any], b: _Builder, json_bytes: int, warnings: list[str]) -> TraceMeta:
    dist = raw.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    rank = _as_int(dist.get("rank")) if _is_int(dist.get("rank")) else None
    world = _as_int(dist.get("world_size")) if _is_int(dist.get("world_size")) else None
    backend = dist.get("backend")
    base = raw.get("baseTimeNanoseconds")
    runtime_names = [n for n in b.names if n.startswith(("hip", "cuda", "cu"))]
    hip = any(n.startswith("hip") for n in runtime_names)
    return TraceMeta(
        path=str(path),
        rank=rank if rank is not None and rank >= 0 else 0,
        rank_known=rank is not None and rank >= 0,
        world_size=world if world is not None and world > 0 else None,
        backend=backend if isinstance(backend, str) else None,
        devices=tuple(_devices(raw.get("deviceProperties"), hip)),
        schema="2021" if b.legacy else "current",
        base_time_ns=_as_int(base),
        pytorch_version=_torch_version(raw),
        trace_bytes=json_bytes,
    )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _as_int(v: Any) -> int | None:
    if _is_int(v):
        return int(v)
    if isinstance(v, str) and v.strip().isascii() and v.strip().isdigit():
        return int(v)
    return None


def _vendor(name: str, hip: bool) -> str:
    n = name.lower()
    if any(w in n for w in ("amd", "instinct", "radeon")) or re.search(r"\bmi\d{3}", n):
        return "amd"
    if any(w in n for w in ("nvidia", "tesla", "geforce", "quadro", "rtx")):
        return "nvidia"
    return "amd" if hip else "unknown"


def _devices(props: Any, hip: bool) -> Iterable[DeviceInfo]:
    if not isinstance(props, list):
        return
    for i, p in enumerate(props):
        if not isinstance(p, dict):
            continue
        name = str(p["name"]) if isinstance(p.get("name"), str) else "unknown"
        vendor = _vendor(name, hip)
        major, minor = _as_int(p.get("computeMajor")), _as_int(p.get("computeMinor"))
        idx = _as_int(p.get("id"))
        yield DeviceInfo(
            index=i if idx is None else idx,
            name=name,
            compute_capability=(major, minor)
            if vendor == "nvidia" and major is not None and minor is not None
            else None,
            total_memory_bytes=_as_int(p.get("totalGlobalMem")),
            sm_count=_as_int(p.get("numSms", p.get("multiProcessorCount"))),
            vendor=vendor,
        )


def _torch_version(raw: dict[str, Any]) -> str | None:
    """`pytorch_version`/`torch_version` keys, else a `torch==X` pin anywhere in nested metadata."""
    for key in ("pytorch_version", "torch_version", "torchVersion"):
        if isinstance(raw.get(key), str):
            return str(raw[key])
    todo: list[Any] = [v for k, v in raw.items() if k not in ("deviceProperties", "distributedInfo")]
    seen = 0
    while todo and seen < 100_000:
        v = todo.pop()
        seen += 1
        if isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, str):
            m = _TORCH_PIN.match(v.strip())
            if m:
                return m.group(1)
    return None
