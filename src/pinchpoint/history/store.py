"""The history database: one row per run (its report, its steady step times), in SQLite.

Where: `$PINCHPOINT_HOME/history.sqlite`, else `$XDG_DATA_HOME/pinchpoint/history.sqlite`, else
`~/.local/share/pinchpoint/history.sqlite`. Concurrent runs write safely: WAL journal, a 30 s busy
timeout, one short transaction per record. A run is keyed by its directory and start time, so
rebuilding its report (`pinchpoint report DIR`) updates its row instead of adding another.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DB_NAME = "history.sqlite"
LOCK_TIMEOUT_S = 30
SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    recorded_at TEXT NOT NULL,
    run_dir TEXT NOT NULL,
    started_at TEXT NOT NULL,
    command TEXT NOT NULL,
    median_ms REAL,
    top TEXT,
    report TEXT NOT NULL,
    step_ns BLOB NOT NULL,
    UNIQUE (run_dir, started_at)
)
"""


def history_path() -> Path:
    explicit = os.environ.get("PINCHPOINT_HOME")
    if explicit:
        return Path(explicit) / DB_NAME
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "pinchpoint" / DB_NAME


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    id: int
    recorded_at: str
    run_dir: str
    started_at: str
    command: tuple[str, ...]
    median_ms: float | None
    top: str | None


@contextmanager
def _connect(path: Path | None = None) -> Iterator[sqlite3.Connection]:
    db = path or history_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(db, timeout=LOCK_TIMEOUT_S)) as conn:
        conn.execute(f"PRAGMA busy_timeout = {LOCK_TIMEOUT_S * 1000}")
        # Switching to WAL takes an exclusive lock and does not wait for a busy one: when several runs
        # open a new database at once, all but one get "database is locked" at once. Retry it.
        _retrying(lambda: conn.execute("PRAGMA journal_mode = WAL"))
        _retrying(lambda: conn.execute(SCHEMA))
        yield conn


def _retrying(op: Callable[[], object]) -> None:
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    delay = 0.005
    while True:
        try:
            op()
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                raise
        time.sleep(delay * (1 + random.random()))
        delay = min(0.2, delay * 2)


def record(run_dir: Path, report: Mapping[str, Any], step_ns: Sequence[int], path: Path | None = None) -> int:
    """Add or update the run of `run_dir`; returns its id."""
    run = report.get("run") or {}
    findings = report.get("findings") or []
    row = (
        time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        str(run_dir.resolve()),
        str(run.get("started_at") or ""),
        json.dumps(run.get("command") or []),
        (report.get("steps") or {}).get("median_ms"),
        findings[0]["id"] if findings else None,
        json.dumps(report),
        np.asarray(step_ns, dtype="<i8").tobytes(),
    )
    with _connect(path) as conn, conn:
        conn.execute(
            "INSERT INTO runs (recorded_at, run_dir, started_at, command, median_ms, top, report, step_ns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_dir, started_at) DO UPDATE SET "
            "recorded_at = excluded.recorded_at, command = excluded.command, median_ms = excluded.median_ms, "
            "top = excluded.top, report = excluded.report, step_ns = excluded.step_ns",
            row,
        )
        found = conn.execute("SELECT id FROM runs WHERE run_dir = ? AND started_at = ?", row[1:3]).fetchone()
    return int(found[0])


def list_runs(limit: int = 20, path: Path | None = None) -> list[RunRecord]:
    """The newest `limit` runs, newest first."""
    with _connect(path) as conn:
        rows = conn.execute(
            "SELECT id, recorded_at, run_dir, started_at, command, median_ms, top FROM runs "
            "ORDER BY id DESC LIMIT ?",
            (limit,),
        ).fetchall()
    return [
        RunRecord(
            id=r[0], recorded_at=r[1], run_dir=r[2], started_at=r[3], command=tuple(json.loads(r[4])),
            median_ms=r[5], top=r[6],
        )
        for r in rows
    ]  # fmt: skip


def load(run_id: int, path: Path | None = None) -> tuple[RunRecord, dict[str, Any], tuple[int, ...]] | None:
    """A recorded run: its row, its report and its steady step times; None if there is no such id."""
    with _connect(path) as conn:
        r = conn.execute(
            "SELECT id, recorded_at, run_dir, started_at, command, median_ms, top, report, step_ns "
            "FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
    if r is None:
        return None
    rec = RunRecord(
        id=r[0], recorded_at=r[1], run_dir=r[2], started_at=r[3], command=tuple(json.loads(r[4])),
        median_ms=r[5], top=r[6],
    )  # fmt: skip
    steps = tuple(int(x) for x in np.frombuffer(r[8], dtype="<i8"))
    return rec, json.loads(r[7]), steps
