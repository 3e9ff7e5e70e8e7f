"""Reads Nsight Systems SQLite exports (`nsys export --type sqlite`) into `KinetoTrace`s.

The same model the Kineto reader builds, so every analysis, rule and report works on it unchanged. Which
tables and columns the file has is found at run time (`nsys_schema`); the table-to-Kind mapping is there.

Columnar all the way: SQLite does the filtering and the joins (process filter, NVTX texts), each query's
rows come in blocks of `BLOCK_ROWS` as one JSON text each (`json_group_array`: no Python object per row),
parsed in C straight into preallocated numpy columns; names
are resolved once per distinct StringIds id. Nsight times are integer nanoseconds already.

Processes: a report may hold several. Every process that ran GPU work (kernels, copies, memsets) becomes
one trace, numbered 0, 1, ... in pid order (`rank_known` False: an export does not say which rank a process
is); host-only processes are left out. An export without GPU work gives one trace per process with CUDA
API calls or NVTX ranges. GPU rows carry the device as `pid` and the stream as `tid`, as Kineto's do.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pinchpoint.errors import TraceError
from pinchpoint.ingest.nsys_schema import (
    GPU_TABLES,
    ID_MASK,
    NO_ID_U32,
    PID_SHIFT,
    SOURCES,
    TEMP_TEXT,
    Query,
    Schema,
    Source,
    block_bounds,
    code_info,
    devices,
    discover,
    export_version,
    is_nsys_export,
    open_db,
    prepare_text_ids,
    proc_expr,
    select_sql,
)
from pinchpoint.ingest.sniff import is_sqlite
from pinchpoint.trace.kineto import (
    MISSING,
    CopyKind,
    EventTable,
    HostMemory,
    Kind,
    KinetoTrace,
    TraceMeta,
    empty_memory,
)

__all__ = ["BLOCK_ROWS", "read_nsys", "read_nsys_ranks"]

BLOCK_ROWS = 1 << 16
"""Rows per query block: SQLite hands over a block as one JSON text (about 60 bytes a row), parsed in C."""
# pid and tid come from a global thread id's 24-bit fields, devices and streams are small: 32 bits hold
# them (0.58x the file in memory with 64, against the 0.5x asked; a stream past 2**31 is an error).
_I64 = npt.NDArray[np.int64]
_COLUMNS: dict[str, Any] = {
    "kind": np.int8,
    "name": np.int32,
    "pid": np.int32,
    "tid": np.int32,
    "start_ns": np.int64,
    "dur_ns": np.int64,
    "correlation": np.int64,
    "device": np.int32,
    "stream": np.int32,
    "copy_kind": np.int8,
    "host_memory": np.int8,
    "bytes": np.int64,
}
INT32_MAX = 2**31 - 1
_GPU_KINDS = np.array([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET], dtype=np.int8)


def read_nsys(path: Path, *, progress: Callable[[int, int], None] | None = None) -> KinetoTrace:
    """The trace of the export's first GPU process (lowest pid); `read_nsys_ranks` reads them all."""
    traces = read_nsys_ranks(path, progress=progress)
    if len(traces) == 1:
        return traces[0]
    note = f"the export holds {len(traces)} processes with GPU work; this is the first (lowest pid)"
    return dataclasses.replace(traces[0], warnings=(*traces[0].warnings, note))


def read_nsys_ranks(path: Path, *, progress: Callable[[int, int], None] | None = None) -> list[KinetoTrace]:
    """One trace per process that ran GPU work, in pid order. `progress(done, total)` counts file bytes.

    Raises TraceError (one line) for anything that is not a readable Nsight export.
    """
    path = Path(path)
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not an Nsight Systems export")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if size == 0:
        raise TraceError(f"{path}: empty file")
    if not is_sqlite(path):
        raise TraceError(f"{path}: not a SQLite database (no 'SQLite format 3' header)")
    try:
        con = open_db(path)
        try:
            return _Reader(path, con, size, progress).read()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise TraceError(
            f"{path}: unreadable SQLite database ({exc}); it may be truncated or damaged: "
            "export the report again (nsys export --type sqlite)"
        ) from exc


class _Names:
    """Event names, interned once per distinct StringIds id, inline NVTX text or enum code."""

    def __init__(self, con: sqlite3.Connection, schema: Schema) -> None:
        self.con = con
        self.strings = schema.has("StringIds", "id") and schema.has("StringIds", "value")
        self.texts = prepare_text_ids(con, schema)
        self.index: dict[str, int] = {}
        self.by_id: dict[int, int] = {}
        """StringIds id (>= 0), inline NVTX text (-1 - its temp id) or -1 -> index into `index`."""

    def intern(self, s: str) -> int:
        return self.index.setdefault(s, len(self.index))

    def of_ids(self, ids: _I64) -> npt.NDArray[np.int32]:
        u, inv = np.unique(ids, return_inverse=True)
        new = [i for i in u.tolist() if i not in self.by_id]
        if new:
            found = self._lookup("StringIds", [i for i in new if i >= 0]) if self.strings else {}
            texts = self._lookup(TEMP_TEXT, [-1 - i for i in new if i <= -2]) if self.texts else {}
            found.update({-1 - k: v for k, v in texts.items()})
            for i in new:
                self.by_id[i] = self.intern(found.get(i, "(unnamed)" if i == -1 else f"(string {i})"))
        lut = np.array([self.by_id[i] for i in u.tolist()], dtype=np.int32)
        return lut[inv.reshape(-1)]

    def _lookup(self, table: str, ids: list[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for k in range(0, len(ids), 500):
            batch = ids[k : k + 500]
            q = f"SELECT id, value FROM {table} WHERE id IN ({', '.join('?' * len(batch))})"
            out.update((int(i), str(v)) for i, v in self.con.execute(q, batch))
        return out

    def of_codes(
        self, codes: _I64, describe: Callable[[int], tuple[str, CopyKind, HostMemory]]
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int8], npt.NDArray[np.int8]]:
        """Names (and copy direction, host memory) of enum-coded rows, described once per distinct code."""
        u, inv = np.unique(codes, return_inverse=True)
        info = [describe(c) for c in u.tolist()]
        name = np.array([self.intern(n) for n, _, _ in info], dtype=np.int32)
        copy = np.array([int(c) for _, c, _ in info], dtype=np.int8)
        host = np.array([int(h) for _, _, h in info], dtype=np.int8)
        inv = inv.reshape(-1)
        return name[inv], copy[inv], host[inv]


class _Reader:
    def __init__(
        self, path: Path, con: sqlite3.Connection, size: int, progress: Callable[[int, int], None] | None
    ) -> None:
        self.path, self.con, self.size, self.progress = path, con, size, progress
        self.cols: dict[str, np.ndarray[Any, Any]] = {}
        self.n = 0
        self.done_rows = 0
        self.total_rows = 0
        self.negative = 0
        self.warnings: list[str] = []

    def read(self) -> list[KinetoTrace]:
        schema, all_tables = discover(self.con)
        if not is_nsys_export(all_tables):
            raise TraceError(
                f"{self.path}: a SQLite database, but not an Nsight Systems export "
                "(no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS table)"
            )
        sources = [s for s in SOURCES if schema.has(s.table, "start") and schema.has(s.table, "end")]
        procs = self._processes(sources, schema)
        if not procs:
            raise TraceError(f"{self.path}: the Nsight Systems export has no CUDA or NVTX events")
        counts = [int(self.con.execute(f'SELECT count(*) FROM "{s.table}"').fetchone()[0]) for s in sources]
        self.total_rows = max(1, sum(counts))
        multi = len(procs) > 1
        self.cols = {k: np.empty(self.total_rows, dtype=t) for k, t in _COLUMNS.items()}
        if multi:
            self.cols["proc"] = np.empty(self.total_rows, dtype=np.int64)
        names = _Names(self.con, schema)
        for s in sources:
            self._read_source(s, schema, procs, names)
        if self.negative:
            self.warnings.append(f"{self.negative} events that end before they start were skipped")
        return self._finish(procs, tuple(names.index), schema)

    def _processes(self, sources: list[Source], schema: Schema) -> tuple[int, ...]:
        """Processes with GPU work; failing those, processes with CUDA API calls or NVTX ranges."""

        def distinct(tables: list[Source]) -> set[int]:
            out: set[int] = set()
            for s in tables:
                q = f'SELECT DISTINCT {proc_expr(s, schema)} FROM "{s.table}"'
                out.update(int(r[0]) for r in self.con.execute(q) if isinstance(r[0], int))
            return out

        gpu = distinct([s for s in sources if s.table in GPU_TABLES])
        if gpu:
            return tuple(sorted(gpu))
        host = distinct([s for s in sources if s.kind in (Kind.RUNTIME, Kind.DRIVER, Kind.USER_ANNOTATION)])
        if host:
            self.warnings.append("the export has no GPU kernels, copies or memsets")
        return tuple(sorted(host))

    def _read_source(self, s: Source, schema: Schema, procs: tuple[int, ...], names: _Names) -> None:
        q = select_sql(s, schema, procs)
        sql = q.block()
        for lo, hi in block_bounds(self.con, s.table, BLOCK_ROWS):
            count, text = self.con.execute(sql, (lo, hi)).fetchone()
            self.done_rows += BLOCK_ROWS
            if count:
                self._put(s, _parse_block(self.path, q, int(count), str(text)), schema, names)
            if self.progress is not None:
                self.progress(min(self.size, self.size * self.done_rows // self.total_rows), self.size)

    def _put(self, s: Source, block: dict[str, _I64], schema: Schema, names: _Names) -> None:
        ok = block["dur"] >= 0
        if not bool(ok.all()):
            self.negative += int((~ok).sum())
            block = {k: v[ok] for k, v in block.items()}
        lo, hi = self.n, self.n + int(block["start"].size)
        self.n = hi
        c = self.cols

        def col(f: str) -> _I64 | int:
            return block.get(f, MISSING)

        c["kind"][lo:hi] = s.kind
        c["start_ns"][lo:hi] = block["start"]
        c["dur_ns"][lo:hi] = block["dur"]
        c["correlation"][lo:hi] = col("corr")
        c["bytes"][lo:hi] = col("bytes")
        c["copy_kind"][lo:hi] = CopyKind.NONE
        c["host_memory"][lo:hi] = HostMemory.UNKNOWN
        if s.gpu:
            stream = np.asarray(col("stream"))
            stream = np.where(stream == NO_ID_U32, MISSING, stream)
            if stream.size and int(stream.max()) > INT32_MAX:
                raise TraceError(f"{self.path}: a stream id past 2**31 ({int(stream.max())})")
            c["pid"][lo:hi] = c["device"][lo:hi] = col("device")
            c["tid"][lo:hi] = c["stream"][lo:hi] = stream
            proc = col("proc")
        else:
            g = block["gtid"]
            c["pid"][lo:hi] = proc = np.where(g >= 0, (g >> PID_SHIFT) & ID_MASK, MISSING)
            c["tid"][lo:hi] = np.where(g >= 0, g & ID_MASK, MISSING)
            c["device"][lo:hi] = c["stream"][lo:hi] = MISSING
        if "proc" in c:
            c["proc"][lo:hi] = proc
        self._names(s, block, schema, names, lo, hi)

    def _names(
        self, s: Source, block: dict[str, _I64], schema: Schema, names: _Names, lo: int, hi: int
    ) -> None:
        c = self.cols
        if "code" in block:  # memcpy, memset, sync: named (and typed) from enum values
            c["name"][lo:hi], c["copy_kind"][lo:hi], c["host_memory"][lo:hi] = names.of_codes(
                block["code"], lambda code: code_info(s.table, code, schema)
            )
        elif "name" in block:
            c["name"][lo:hi] = names.of_ids(block["name"])
        else:
            c["name"][lo:hi] = names.intern(f"({s.table})")

    def _finish(self, procs: tuple[int, ...], names: tuple[str, ...], schema: Schema) -> list[KinetoTrace]:
        c = {k: v[: self.n] for k, v in self.cols.items()}
        self.cols = {}
        driver = np.array([n.startswith("cu") and not n.startswith("cuda") for n in names] or [False])
        c["kind"][(c["kind"] == Kind.RUNTIME) & driver[c["name"]]] = Kind.DRIVER
        names = _emit_nvtx_ops(c, names)
        order = np.lexsort((c["start_ns"], *((c["proc"],) if "proc" in c else ())))
        for k in list(c):  # one column at a time: the peak is one extra column
            c[k] = c[k][order]
        del order
        _longest_first(c)
        c = _drop_duplicate_calls(c, self.warnings)
        proc = c.pop("proc", None)
        bounds = (
            [0, len(c["kind"])] if proc is None else np.searchsorted(proc, (*procs, procs[-1] + 1)).tolist()
        )
        version = export_version(self.con, schema)
        out: list[KinetoTrace] = []
        for rank, pid in enumerate(procs):
            part = {k: v[bounds[rank] : bounds[rank + 1]] for k, v in c.items()}
            gpu = np.isin(part["kind"], _GPU_KINDS)
            used = [int(d) for d in np.unique(part["device"][gpu]).tolist() if d >= 0]
            events = EventTable(names=names, external_id=_no_ids(len(part["kind"])), **part)
            warnings = list(self.warnings)
            if len(procs) > 1:
                warnings.append(
                    f"process {pid} of {len(procs)} with GPU work in the export; ranks numbered in pid order"
                )
            meta = TraceMeta(
                path=str(self.path),
                rank=rank,
                world_size=len(procs) if len(procs) > 1 else None,
                devices=devices(self.con, schema, pid, used),
                schema=f"nsys {version}" if version else "nsys",
                trace_bytes=self.size,
            )
            out.append(KinetoTrace(meta=meta, events=events, memory=empty_memory(), warnings=tuple(warnings)))
        return out


EMIT_NVTX_OP = re.compile(
    r"^((?:aten|prim|c10d|torchvision|quantized|_c10d_functional)::\w+)(?:, seq = \d+|, op_id = \d+|, sizes = .*)*$"
)
"""`torch.autograd.profiler.emit_nvtx()`'s range per op: `aten::addmm, seq = 12, sizes = [[64, 8], ...]`."""


def _emit_nvtx_ops(c: dict[str, _I64], names: tuple[str, ...]) -> tuple[str, ...]:
    """NVTX ranges that `emit_nvtx()` pushed for each op become the framework ops they are (CPU_OP,
    named by the op alone, its `seq`/`sizes` suffix dropped): the op-level analyses then see them as
    in a Kineto trace. Returns the names the table then uses (each op name once)."""
    match = [EMIT_NVTX_OP.match(n) for n in names]
    if not any(match):
        return names
    out: dict[str, int] = {}
    remap = np.empty(len(names), dtype=np.int32)
    for i, (n, m) in enumerate(zip(names, match, strict=True)):
        remap[i] = out.setdefault(m.group(1) if m is not None else n, len(out))
    is_op = np.array([m is not None for m in match])
    c["kind"][(c["kind"] == Kind.USER_ANNOTATION) & is_op[c["name"]]] = Kind.CPU_OP
    c["name"][:] = remap[c["name"]]
    return tuple(out)


def _parse_block(path: Path, q: Query, count: int, text: str) -> dict[str, _I64]:
    """`[[1,2],[3,4]]` -> one int64 column per field. Anything but integers (text, reals) is an error."""
    width = len(q.fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a partial parse warns; the size check below catches it
        try:
            flat = np.fromstring(text[2:-2].replace("],[", ","), dtype=np.int64, sep=",")
        except ValueError:  # numpy 2 raises where numpy 1 warned
            flat = np.zeros(0, dtype=np.int64)
    if flat.size != count * width or not text.startswith("[["):
        raise TraceError(f"{path}: {q.table} holds values that are not integers; is the export damaged?")
    table = flat.reshape(count, width)
    return {f: table[:, i] for i, f in enumerate(q.fields)}


def _longest_first(c: dict[str, Any]) -> None:
    """Rows that start together (in one process) put longest first, as the trace model wants: the sort
    was by start alone, so no negated copy of every duration is held beside the columns (56 MB on a
    1 GB export); only the rows in such a tie are touched."""
    start = c["start_ns"]
    same = start[1:] == start[:-1]
    if "proc" in c:
        same &= c["proc"][1:] == c["proc"][:-1]
    if not same.any():
        return
    tied = np.concatenate(([False], same)) | np.concatenate((same, [False]))
    rows = np.flatnonzero(tied)
    del tied
    begins = np.ones(rows.size, dtype=bool)
    begins[1:] = ~same[rows[1:] - 1]  # a row that does not start with the one before opens a run
    moved = rows[np.lexsort((-c["dur_ns"][rows], np.cumsum(begins)))]
    for k in c:
        c[k][rows] = c[k][moved]


def _no_ids(n: int) -> _I64:
    """Nsight has no framework-op ids: one read-only MISSING broadcast over the rows (no memory per row)."""
    return np.broadcast_to(np.int64(MISSING), (n,))


def _drop_duplicate_calls(c: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """One CUDA API call can appear as several RUNTIME rows with one correlation id on one thread (e.g.
    `cudaLaunchKernel` and `cudaLaunchKernel_v7000`): keep the first, outermost one (rows are sorted)."""
    rows = np.flatnonzero(np.isin(c["kind"], (Kind.RUNTIME, Kind.DRIVER)) & (c["correlation"] > 0))
    if rows.size < 2:
        return c
    rows = rows[np.argsort(c["correlation"][rows], kind="stable")]
    same = (
        (np.diff(c["correlation"][rows]) == 0)
        & (np.diff(c["tid"][rows]) == 0)
        & (np.diff(c["pid"][rows]) == 0)
    )
    if "proc" in c:
        same &= np.diff(c["proc"][rows]) == 0
    if not bool(same.any()):
        return c
    keep = np.ones(len(c["kind"]), dtype=np.bool_)
    keep[rows[1:][same]] = False
    warnings.append(
        f"{int((~keep).sum())} CUDA API rows repeating another's correlation id on its thread were dropped"
    )
    return {k: v[keep] for k, v in c.items()}
