"""Intel VTune Profiler's CSV reports into `Stacks`: `vtune -report hotspots` and `vtune -report top-down`.

A hotspots report (`vtune -report hotspots -format csv`) is flat, one row per function, its self time in
`CPU Time` (or `CPU Time:Self`), which may be split into `CPU Time:Effective Time`, `:Spin Time` and
`:Overhead Time`; `Module`, `Function (Full)`, `Source File`, `Start Address` may follow. A top-down report
(`vtune -report top-down -format csv`) is the call tree, root first: one row per node, its `Function
Stack` cell indented one space per level under a `Total` row, with `CPU Time:Total` and `CPU Time:Self`.
A callstacks report (`Function`, `Function Stack`, `CPU Time`) reads as a hotspots one: its function rows,
not the call-path rows under them.

Columns are found by name (case, and spacing around `:`, aside), never by position. The delimiter
(`-csv-delimiter`: tab, comma or semicolon) is the one that splits the header into known names; the
header may follow lines VTune printed first (`Column filter is ON.`). Times are seconds (`1.234`,
`1.234s`, `1,234.5`; `ms`/`us`/`ns` too); an empty cell is no time. Rows that cannot be read (cut,
too long, a time that is not one) are counted, not fatal. VTune writes the kernel's module as `vmlinux`.
"""

from __future__ import annotations

import codecs
import csv
import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pinchpoint.errors import TraceError
from pinchpoint.ingest import stacks as _folded
from pinchpoint.trace.stacks import Frame, Stacks, StackSample

MAX_BYTES = _folded.MAX_BYTES
"""The most report text read (the folded-stack reader's cap)."""
MAX_DEPTH = _folded.MAX_DEPTH
MAX_LINE = 65536
"""Longer lines are no report rows (nor would the csv module read them: its field limit is 128 KiB)."""
HEADER_LINES = 20
"""Lines searched for the header row (VTune's notes may come first)."""
DELIMITERS = ("\t", ",", ";")
MAX_NS = 10**18
"""About 31 years of CPU time: a larger value is no measurement."""
_BINARY_PROBE = 65536
_TIME = re.compile(r"(?P<number>[0-9.,eE+-]+)\s*(?P<unit>s|ms|us|µs|ns)?")
_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
_THOUSANDS = re.compile(r"[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?")
_UNIT_NS = {None: 1e9, "s": 1e9, "ms": 1e6, "us": 1e3, "µs": 1e3, "ns": 1.0}
_FUNCTION, _STACK, _MODULE = "function", "function stack", "module"
_SELF = ("cpu time:self", "cpu time")
_THREAD = ("thread", "tid", "thread id")
_PID = ("pid", "process id")


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where a report's header is and what it says."""

    kind: str
    """"hotspots" (flat, callstacks too) or "top-down"."""
    delimiter: str
    columns: dict[str, int]
    """Normalised column name -> its index (the first, where a name repeats)."""
    width: int
    line: int

    def index(self, names: tuple[str, ...]) -> int | None:
        return next((self.columns[n] for n in names if n in self.columns), None)


def _normalise(name: str) -> str:
    """`CPU Time: Self ` -> `cpu time:self`."""
    name = re.sub(r"\s*:\s*", ":", name.replace("\ufeff", "").strip())
    return re.sub(r"\s+", " ", name).lower()


def _cells(line: str, delimiter: str) -> list[str] | None:
    """One line's cells (a row never spans lines), or None where the csv module refuses it."""
    try:
        return next(csv.reader((line,), delimiter=delimiter), [])
    except csv.Error:
        return None


def _layout(line: str, number: int) -> _Layout | None:
    """The report a header line starts, or None if it is not a VTune header."""
    for delimiter in DELIMITERS:
        if delimiter not in line or (cells := _cells(line, delimiter)) is None:
            continue
        columns: dict[str, int] = {}
        for i, cell in enumerate(cells):
            columns.setdefault(_normalise(cell), i)
        if _FUNCTION in columns and any(n in columns for n in _SELF):
            return _Layout("hotspots", delimiter, columns, len(cells), number)
        if _STACK in columns and _SELF[0] in columns:
            return _Layout("top-down", delimiter, columns, len(cells), number)
    return None


def _find_layout(lines: list[str]) -> _Layout | None:
    candidates = ((n, line) for n, line in enumerate(lines) if line.strip() and len(line) <= MAX_LINE)
    for number, line in itertools.islice(candidates, HEADER_LINES):
        if (layout := _layout(line, number)) is not None:
            return layout
    return None


def _decode(data: bytes) -> str | None:
    """The text of a report's bytes (UTF-8, or UTF-16 after its byte-order mark), None when binary."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    if b"\0" in data[:_BINARY_PROBE]:
        return None
    return data.decode("utf-8-sig", errors="replace")


def _lines(text: str) -> list[str]:
    """LF or CRLF lines (not `str.splitlines`, which also splits at form feeds and U+2028)."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def looks_like_vtune_csv(head: bytes) -> bool:
    """Whether a file's first bytes hold a VTune hotspots or top-down CSV header row."""
    text = _decode(head)
    if text is None:
        return False
    lines = _lines(text)
    if len(lines) > 1 and len(head) >= _BINARY_PROBE:
        lines.pop()  # cut short by the sniff
    return _find_layout(lines) is not None


def time_ns(cell: str) -> int | None:
    """A VTune time cell (`1.234`, `1.234s`, `1,234.5`, `12ms`, empty: 0) in nanoseconds; None if it is
    no time (a percentage, text, a negative or non-finite number)."""
    value = cell.strip()
    if not value:
        return 0
    if value.isascii() and value.replace(".", "", 1).isdigit():  # the common case: plain seconds
        return round(float(value) * 1e9) if float(value) * 1e9 <= MAX_NS else None
    m = _TIME.fullmatch(value)
    if m is None:
        return None
    number = m.group("number")
    if _THOUSANDS.fullmatch(number):
        number = number.replace(",", "")
    if not _NUMBER.fullmatch(number):
        return None
    ns = float(number) * _UNIT_NS[m.group("unit")]
    return round(ns) if math.isfinite(ns) and ns <= MAX_NS else None


def _rows(lines: list[str], layout: _Layout, ends_cut: bool) -> Iterator[list[str] | None]:
    """The data rows' cells, None for a row that cannot be read (too long, refused, a cut last row).

    A top-down row's indentation may stand before the quotes of its first cell (`   "f(a, b)",...`):
    it is kept, and the quoted cell read whole.
    """
    last = len(lines) - 1
    indented = layout.kind == "top-down" and layout.columns[_STACK] == 0
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" ")) if indented else 0
        cells = None if len(line) > MAX_LINE else _cells(line[indent:], layout.delimiter)
        if cells and indent:
            cells[0] = " " * indent + cells[0]
        if cells is not None and number == last and ends_cut and len(cells) < layout.width:
            cells = None
        yield cells


_Key = tuple[int | None, str | None, tuple[tuple[str, str], ...]]
"""(pid, thread, the path's (function, module) pairs): strings hash once and are cached, Frames not."""


@dataclass(slots=True)
class _Tally:
    """What the rows added up to."""

    merged: dict[_Key, int]
    bad: int = 0
    rows: int = 0
    percent: bool = False

    def time(self, cell: str) -> int | None:
        ns = time_ns(cell)
        if ns is None:
            self.bad += 1
            self.percent = self.percent or cell.strip().endswith("%")
        return ns

    def add(self, key: _Key, ns: int) -> None:
        if ns > 0:
            self.merged[key] = self.merged.get(key, 0) + ns


def _cell(cells: list[str], index: int | None) -> str:
    return cells[index] if index is not None and index < len(cells) else ""


def _flat(rows: Iterator[list[str] | None], layout: _Layout, tally: _Tally) -> None:
    """A hotspots (or callstacks) report: one single-frame sample per function row."""
    function, time = layout.columns[_FUNCTION], layout.index(_SELF)
    module, stack = layout.index((_MODULE,)), layout.index((_STACK,))
    thread, pid = layout.index(_THREAD), layout.index(_PID)
    for cells in rows:
        tally.rows += 1
        if cells is None or len(cells) <= max(function, time or 0):
            tally.bad += 1
            continue
        name = cells[function].strip()
        if not name:
            tally.bad += not _cell(cells, stack).strip()  # else a callstacks report's call-path row
            continue
        if (ns := tally.time(_cell(cells, time))) is None:
            continue
        pid_text = _cell(cells, pid).strip()
        key = (
            int(pid_text) if pid_text.isascii() and pid_text.isdigit() and len(pid_text) < 10 else None,
            _cell(cells, thread).strip() or None,
            ((name, _cell(cells, module).strip()),),
        )
        tally.add(key, ns)


def _top_down(rows: Iterator[list[str] | None], layout: _Layout, tally: _Tally) -> None:
    """A top-down report: each row's path from the indentation above it, a sample of its self time."""
    stack, time, module = layout.columns[_STACK], layout.columns[_SELF[0]], layout.index((_MODULE,))
    ancestors: list[tuple[int, tuple[tuple[str, str], ...]]] = []  # (depth, the path down to it)
    first = True
    for cells in rows:
        tally.rows += 1
        if cells is None or len(cells) <= max(stack, time):
            tally.bad += 1
            continue
        raw = cells[stack]
        name = raw.lstrip(" ")
        depth, name = len(raw) - len(name), name.strip()
        if not name:
            tally.bad += 1
            continue
        if first and depth == 0 and name.lower() == "total":
            first = False
            continue  # the tree's root: the whole result, not a function
        first = False
        while ancestors and ancestors[-1][0] >= depth:
            ancestors.pop()
        if len(ancestors) >= MAX_DEPTH:
            tally.bad += 1
            continue
        path = (ancestors[-1][1] if ancestors else ()) + ((name, _cell(cells, module).strip()),)
        ancestors.append((depth, path))
        if (ns := tally.time(cells[time])) is not None:
            tally.add((None, None, path), ns)


def read_vtune(path: Path) -> tuple[Stacks, int]:
    """The stacks of a VTune hotspots or top-down CSV report and how many of its rows could not be read.

    `Frame.function` is the `Function` (or `Function Stack`) cell, `Frame.file` the `Module`; the count is
    the row's self CPU time in nanoseconds (whence `rate_hz` 1e9). A hotspots row is a one-frame stack, a
    top-down row its path from the tree's root; rows of the same stack are summed.
    """
    text = _decode(_read_bytes(path))
    if text is None:
        raise TraceError(f"{path}: is binary, not a VTune CSV report")
    lines = _lines(text)
    ends_cut = bool(lines[-1])  # no newline ends the last line: the file may have been cut
    layout = _find_layout(lines)
    if layout is None:
        raise TraceError(
            f"{path}: no VTune report header (Function or Function Stack, and CPU Time) in its first "
            f"{HEADER_LINES} lines; expected `vtune -report hotspots|top-down -format csv` output"
        )
    tally = _Tally(merged={})
    rows = _rows(lines[layout.line + 1 :], layout, ends_cut)
    (_flat if layout.kind == "hotspots" else _top_down)(rows, layout, tally)
    if not tally.merged:
        if tally.percent:
            raise TraceError(f"{path}: its CPU times are percentages, not seconds; report them as times")
        raise TraceError(
            f"{path}: a VTune {layout.kind} report with no CPU time in its {tally.rows} row(s) "
            f"({tally.bad} unreadable)"
        )
    frame_of: dict[tuple[str, str], Frame] = {}
    samples = tuple(
        StackSample(
            frames=tuple(frame_of.get(f) or frame_of.setdefault(f, Frame(*f)) for f in path),
            count=count,
            pid=pid,
            thread=thread,
        )
        for (pid, thread, path), count in tally.merged.items()
    )
    return Stacks(samples=samples, rate_hz=1e9, source=path.name, idle_included=False), tally.bad


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, refused with a TraceError when missing, unreadable or too big."""
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise TraceError(
                f"{path}: {size >> 20} MiB of VTune report is more than pinchpoint reads ({MAX_BYTES >> 20} MiB)"
            )
        return path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the VTune report ({exc.strerror or exc})") from exc
