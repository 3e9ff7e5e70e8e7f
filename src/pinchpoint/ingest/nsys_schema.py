"""What pinchpoint reads from an Nsight Systems SQLite export, found in the file at run time.

The export's schema moves between Nsight versions: tables exist only when their rows were collected,
columns appear and go, 2022 exports have no ENUM_* tables and name their metadata table differently. So
nothing here assumes one version. `discover` lists the tables and their columns (`sqlite_master`,
`PRAGMA table_info`); `SOURCES` says which table gives which `Kind` and which columns may carry each field
(the first present wins); `select_sql` writes the query for the columns this file has. Enumerations come
from the file's own ENUM_* tables, else from the numbering of export schema 3.13 (`DEFAULT_*`).

How Nsight's tables become Kineto's event kinds (`trace/kineto.py`):

    CUPTI_ACTIVITY_KIND_KERNEL           KERNEL    name: demangled (Kineto's), device, stream, correlation
    CUPTI_ACTIVITY_KIND_MEMCPY           MEMCPY    "Memcpy HtoD (Pageable -> Device)" as Kineto names it
    CUPTI_ACTIVITY_KIND_MEMSET           MEMSET    "Memset (Device)"
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION  OTHER     "Stream Sync", ...: Kineto's `cuda_sync`, also OTHER
    CUPTI_ACTIVITY_KIND_RUNTIME          RUNTIME   (DRIVER for `cu*` driver calls in the same table)
    CUPTI_ACTIVITY_KIND_DRIVER           DRIVER
    NVTX_EVENTS (ranges only)            USER_ANNOTATION (`ProfilerStep#N` ranges are steps, as in Kineto)
    OSRT_API                             OTHER     host thread activity (read, poll, mutex waits, ...)
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from pinchpoint.trace.kineto import CopyKind, DeviceInfo, HostMemory, Kind

PID_SHIFT = 24
ID_MASK = 0xFFFFFF
"""A serialized globalTid packs pid and tid: pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF (globalPid too)."""
NO_ID_U32 = 0xFFFFFFFF
"""CUPTI's "no value" for 32-bit ids (the stream of a context sync)."""
TEMP_TEXT = "temp.pinchpoint_nvtx_text"
"""Distinct inline NVTX texts, numbered, so ranges carry a text id like every other name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """One activity table: its Kind and, per field, the columns that may carry it (first present wins)."""

    table: str
    kind: Kind
    gpu: bool
    """GPU activity (globalPid, device, stream) rather than a host thread's (globalTid)."""
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()
    enums: tuple[str, ...] = ()
    """Columns packed one byte each into the `code` field (copy kind and memory kinds, sync type)."""
    ranges_only: bool = False
    """NVTX: marks and domain events have no end; only ranges are kept."""


_CORR = ("corr", ("correlationId",))
_GPU = (("device", ("deviceId",)), ("stream", ("streamId",)), _CORR)
SOURCES = (
    Source(
        table="CUPTI_ACTIVITY_KIND_KERNEL",
        kind=Kind.KERNEL,
        gpu=True,
        fields=(*_GPU, ("name", ("demangledName", "shortName", "mangledName", "name"))),
    ),
    Source(
        table="CUPTI_ACTIVITY_KIND_MEMCPY",
        kind=Kind.MEMCPY,
        gpu=True,
        fields=(*_GPU, ("bytes", ("bytes",))),
        enums=("copyKind", "srcKind", "dstKind"),
    ),
    Source(
        table="CUPTI_ACTIVITY_KIND_MEMSET",
        kind=Kind.MEMSET,
        gpu=True,
        fields=(*_GPU, ("bytes", ("bytes",))),
        enums=("memKind",),
    ),
    Source(
        table="CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        kind=Kind.OTHER,
        gpu=True,
        fields=_GPU,
        enums=("syncType",),
    ),
    Source(
        table="CUPTI_ACTIVITY_KIND_RUNTIME",
        kind=Kind.RUNTIME,
        gpu=False,
        fields=(_CORR, ("name", ("nameId",))),
    ),
    Source(
        table="CUPTI_ACTIVITY_KIND_DRIVER", kind=Kind.DRIVER, gpu=False, fields=(_CORR, ("name", ("nameId",)))
    ),
    Source(
        table="NVTX_EVENTS",
        kind=Kind.USER_ANNOTATION,
        gpu=False,
        fields=(("name", ("textId",)),),
        ranges_only=True,
    ),
    Source(table="OSRT_API", kind=Kind.OTHER, gpu=False, fields=(("name", ("nameId",)),)),
)
GPU_TABLES = tuple(s.table for s in SOURCES if s.gpu and s.kind.on_gpu)

DEFAULT_MEMCPY_OPER = {
    i: f"CUDA_MEMCPY_KIND_{s}"
    for i, s in enumerate(
        [
            "UNKNOWN",
            "HTOD",
            "DTOH",
            "HTOA",
            "ATOH",
            "ATOA",
            "ATOD",
            "DTOA",
            "DTOD",
            "HTOH",
            "PTOP",
            "UVM_HTOD",
            "UVM_DTOH",
            "UVM_DTOD",
        ]
    )
}
DEFAULT_MEM_KIND = {
    i: f"CUDA_MEMOPR_MEMORY_KIND_{s}"
    for i, s in enumerate(
        ["PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC", "UNKNOWN"]
    )
}
DEFAULT_SYNC_TYPE = {
    i: f"CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_{s}"
    for i, s in enumerate(
        ["UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE", "CONTEXT_SYNCHRONIZE"]
    )
}
ENUMS = {
    "copyKind": ("ENUM_CUDA_MEMCPY_OPER", DEFAULT_MEMCPY_OPER),
    "srcKind": ("ENUM_CUDA_MEM_KIND", DEFAULT_MEM_KIND),
    "dstKind": ("ENUM_CUDA_MEM_KIND", DEFAULT_MEM_KIND),
    "memKind": ("ENUM_CUDA_MEM_KIND", DEFAULT_MEM_KIND),
    "syncType": ("ENUM_CUPTI_SYNC_TYPE", DEFAULT_SYNC_TYPE),
}
"""Enum column -> (the export's table of its values, the values to assume when that table is absent)."""
COPY_KIND = {"HtoD": CopyKind.H2D, "DtoH": CopyKind.D2H, "DtoD": CopyKind.D2D}
"""As Kineto's names read: peer, array and unified-memory copies are CopyKind.OTHER."""
SYNC_NAMES = {
    "EVENT_SYNCHRONIZE": "Event Sync",
    "STREAM_WAIT_EVENT": "Stream Wait Event",
    "STREAM_SYNCHRONIZE": "Stream Sync",
    "CONTEXT_SYNCHRONIZE": "Context Sync",
}
"""Kineto's `cuda_sync` event names."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Schema:
    tables: dict[str, tuple[str, ...]]
    """Table name -> its columns, for every table of interest that the file has."""
    enums: dict[str, dict[int, str]] = field(default_factory=dict)
    """Enum column (copyKind, ...) -> value -> symbol name."""

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.tables.get(table)
        return cols is not None and (column is None or column in cols)

    def first(self, table: str, candidates: tuple[str, ...]) -> str | None:
        return next((c for c in candidates if self.has(table, c)), None)


def open_db(path: Path) -> sqlite3.Connection:
    """Read-only and immutable: no journal, no locks, nothing written next to the file."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True, check_same_thread=False)
    con.execute("PRAGMA temp_store = MEMORY")
    return con


_WANTED = {s.table for s in SOURCES} | {
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    *(t for t, _ in ENUMS.values()),
}


def discover(con: sqlite3.Connection) -> tuple[Schema, list[str]]:
    """The tables of interest and their columns; also every table name (to tell what the file is)."""
    names = [str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    tables: dict[str, tuple[str, ...]] = {}
    for t in names:
        if t in _WANTED or ("META_DATA" in t and "EXPORT" in t):
            tables[t] = tuple(str(r[1]) for r in con.execute(f'PRAGMA table_info("{t}")'))
    enums: dict[str, dict[int, str]] = {}
    for col, (table, default) in ENUMS.items():
        if "id" in tables.get(table, ()) and "name" in tables.get(table, ()):
            rows = con.execute(f'SELECT id, name FROM "{table}" WHERE id BETWEEN 0 AND 254').fetchall()
            enums[col] = {int(i): str(n) for i, n in rows if isinstance(i, int) and n is not None}
        else:
            enums[col] = default
    return Schema(tables=tables, enums=enums), names


def is_nsys_export(all_tables: list[str]) -> bool:
    return any(t.startswith("CUPTI_ACTIVITY_KIND_") or t == "NVTX_EVENTS" for t in all_tables)


def proc_expr(source: Source, schema: Schema, alias: str = "") -> str:
    """SQL for the row's process id (from globalPid on the GPU, globalTid on the host); NULL when absent."""
    col = "globalPid" if source.gpu else "globalTid"
    if not schema.has(source.table, col):
        col = "globalTid" if schema.has(source.table, "globalTid") else ""
    return f'(({alias}"{col}" >> {PID_SHIFT}) & {ID_MASK})' if col else "NULL"


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """One source's rows over the chosen processes: `SELECT {select} FROM {source} WHERE {where}`."""

    table: str
    fields: tuple[str, ...]
    """Names of the selected values, in order."""
    select: str
    source: str
    where: str

    def block(self) -> str:
        """Rows with rowid in (?, ?] as one JSON array of arrays: one Python object per block, not per row."""
        return (
            f"SELECT count(*), json_group_array(json_array({self.select})) FROM {self.source} "
            f"WHERE e.rowid > ? AND e.rowid <= ? AND {self.where}"
        )


def select_sql(source: Source, schema: Schema, procs: tuple[int, ...]) -> Query:
    """The query for one source over the given processes, with the columns this file has."""
    t = source.table
    exprs = [("start", 'COALESCE(e."start", 0)'), ("dur", 'COALESCE(e."end" - e."start", -1)')]
    for name, candidates in source.fields:
        col = schema.first(t, candidates)
        if col is not None:
            exprs.append((name, f'COALESCE(e."{col}", -1)'))
    if source.enums:
        packed = [
            f'((COALESCE(e."{c}", 255) & 255) << {8 * (len(source.enums) - 1 - i)})'
            if schema.has(t, c)
            else "0"
            for i, c in enumerate(source.enums)
        ]
        exprs.append(("code", " | ".join(packed)))
    proc = proc_expr(source, schema, "e.")
    joins, where = "", [f"{proc} IN ({', '.join(map(str, procs))})"]
    if source.gpu:
        exprs.append(("proc", proc))
    else:
        exprs.append(("gtid", 'COALESCE(e."globalTid", -1)'))
    if source.ranges_only:
        where.append('e."end" IS NOT NULL')
        if schema.has(t, "text"):
            joins = f" LEFT JOIN {TEMP_TEXT} AS x ON x.value = e.text"
            name = (
                "COALESCE(e.textId, -1 - x.id, -1)" if schema.has(t, "textId") else "COALESCE(-1 - x.id, -1)"
            )
            exprs = [(n, x) for n, x in exprs if n != "name"] + [("name", name)]
    return Query(
        table=t,
        fields=tuple(n for n, _ in exprs),
        select=", ".join(x for _, x in exprs),
        source=f'"{t}" AS e{joins}',
        where=" AND ".join(where),
    )


def block_bounds(con: sqlite3.Connection, table: str, rows: int) -> list[tuple[int, int]]:
    """(lo, hi] rowid ranges of about `rows` rows each, found by walking the rowid b-tree (sparse rowids
    cost nothing extra)."""
    out: list[tuple[int, int]] = []
    lo = -(1 << 63)
    q = f'SELECT rowid FROM "{table}" WHERE rowid > ? ORDER BY rowid LIMIT 1 OFFSET ?'
    while True:
        row = con.execute(q, (lo, rows - 1)).fetchone()
        hi = int(row[0]) if row is not None else (1 << 63) - 1
        out.append((lo, hi))
        if row is None:
            return out
        lo = hi


def prepare_text_ids(con: sqlite3.Connection, schema: Schema) -> bool:
    """Number the distinct inline NVTX texts in a temporary table (the export is never written)."""
    if not (schema.has("NVTX_EVENTS", "text") and schema.has("NVTX_EVENTS", "end")):
        return False
    con.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {TEMP_TEXT.split('.')[1]} (id INTEGER PRIMARY KEY, value TEXT UNIQUE)"
    )
    con.execute(
        f"INSERT OR IGNORE INTO {TEMP_TEXT} (value) "
        'SELECT DISTINCT text FROM NVTX_EVENTS WHERE text IS NOT NULL AND "end" IS NOT NULL'
    )
    return True


def _suffix(enum_name: str, marker: str) -> str:
    return enum_name.rsplit(marker, 1)[-1] if marker in enum_name else enum_name


def _direction(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_UVM_HTOD -> 'UVM HtoD' (Kineto's spelling of a direction)."""
    words = _suffix(enum_name, "KIND_").split("_")
    return " ".join(w[0] + "to" + w[3] if len(w) == 4 and w[1:3] == "TO" else w for w in words)


def _memory_label(enum_name: str) -> str:
    return _suffix(enum_name, "KIND_").replace("_", " ").title()


def memcpy_info(code: int, schema: Schema) -> tuple[str, CopyKind, HostMemory]:
    """Name, direction and host memory of a memcpy from its packed (copyKind, srcKind, dstKind)."""
    oper = schema.enums["copyKind"].get(code >> 16 & 255, "UNKNOWN")
    src = schema.enums["srcKind"].get(code >> 8 & 255, "UNKNOWN")
    dst = schema.enums["dstKind"].get(code & 255, "UNKNOWN")
    direction = _direction(oper)
    sides = (_memory_label(src), _memory_label(dst))
    host = HostMemory.UNKNOWN
    if "Pageable" in sides:
        host = HostMemory.PAGEABLE
    elif "Pinned" in sides:
        host = HostMemory.PINNED
    name = f"Memcpy {direction} ({sides[0]} -> {sides[1]})"
    return name, COPY_KIND.get(direction, CopyKind.OTHER), host


def code_info(table: str, code: int, schema: Schema) -> tuple[str, CopyKind, HostMemory]:
    """Name (as Kineto spells it), copy direction and host memory of a row from its packed enum code."""
    if table == "CUPTI_ACTIVITY_KIND_MEMCPY":
        return memcpy_info(code, schema)
    if table == "CUPTI_ACTIVITY_KIND_MEMSET":
        name = f"Memset ({_memory_label(schema.enums['memKind'].get(code & 255, 'UNKNOWN'))})"
    else:
        name = SYNC_NAMES.get(_suffix(schema.enums["syncType"].get(code & 255, ""), "TYPE_"), "Sync")
    return name, CopyKind.NONE, HostMemory.UNKNOWN


def export_version(con: sqlite3.Connection, schema: Schema) -> str | None:
    """EXPORT_SCHEMA_VERSION from the export's metadata table, whatever this version calls it."""
    for t, cols in schema.tables.items():
        if "META_DATA" in t and {"name", "value"} <= set(cols):
            row = con.execute(
                f'SELECT value FROM "{t}" WHERE name = ?', ("EXPORT_SCHEMA_VERSION",)
            ).fetchone()
            if row is not None and row[0] is not None:
                return str(row[0])
    return None


def devices(con: sqlite3.Connection, schema: Schema, pid: int, used: list[int]) -> tuple[DeviceInfo, ...]:
    """TARGET_INFO_GPU rows for the CUDA device ids a process's events name.

    Events carry the process's CUDA device id; TARGET_INFO_CUDA_DEVICE maps it to a GPU row where the
    export has it, else the row whose cuDevice (or id) is that number.
    """
    if not schema.has("TARGET_INFO_GPU", "id"):
        return tuple(DeviceInfo(index=d, name="unknown", vendor="nvidia") for d in used)
    cols = ("id", "cuDevice", "name", "totalMemory", "smCount", "computeMajor", "computeMinor")
    have = [c if schema.has("TARGET_INFO_GPU", c) else "NULL" for c in cols]
    query = f"SELECT {', '.join(have)} FROM TARGET_INFO_GPU"
    rows = [
        {c: (v if isinstance(v, int | str) else None) for c, v in zip(cols, r, strict=True)}
        for r in con.execute(query)
    ]
    gpu_of: dict[int, int] = {}
    if all(schema.has("TARGET_INFO_CUDA_DEVICE", c) for c in ("pid", "cudaId", "gpuId")):
        q = "SELECT cudaId, gpuId FROM TARGET_INFO_CUDA_DEVICE WHERE pid = ?"
        gpu_of = {c: g for c, g in con.execute(q, (pid,)) if isinstance(c, int) and isinstance(g, int)}
    out = []
    for d in used:
        by = [r for r in rows if r["id"] == gpu_of.get(d, -1)] or [r for r in rows if r["cuDevice"] == d]
        r = (by or [r for r in rows if r["id"] == d] or [{}])[0]
        major, minor = _int(r.get("computeMajor")), _int(r.get("computeMinor"))
        out.append(
            DeviceInfo(
                index=d,
                name=str(r.get("name") or "unknown"),
                compute_capability=(major, minor) if major is not None and minor is not None else None,
                total_memory_bytes=_int(r.get("totalMemory")),
                sm_count=_int(r.get("smCount")),
                vendor="nvidia",
            )
        )
    return tuple(out)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
