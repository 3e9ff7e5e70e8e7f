"""Which reader a file needs, from its first bytes (never its name): Nsight SQLite, `perf script` text,
a VTune CSV report, folded stacks, else Kineto JSON."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"
"""The 16-byte header every SQLite 3 database starts with (`nsys export --type sqlite` writes one)."""


def is_sqlite(path: Path) -> bool:
    """True when `path` is a regular file that starts with the SQLite 3 header."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


FOLDED_LINE = re.compile(r"^[^\s].*\S \d+$")
SNIFF_LINES = 20
FOLDED_MOST = 0.75
"""Of the first lines that are not comments, the share that must read as folded stacks (a file with a
malformed line among them is still one; its reader counts the bad lines)."""
COMMENTS = ("#", "//")


def is_folded(path: Path) -> bool:
    """True when the first lines read as folded stacks (`frame;frame;leaf COUNT`), UTF-8 or UTF-16."""
    try:
        with open(path, "rb") as f:
            head = f.read(8192)
    except OSError:
        return False
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = head.decode("utf-16", errors="ignore")
    elif b"\0" in head:
        return False
    else:
        text = head.decode("utf-8-sig", errors="replace")
    lines = [ln.strip() for ln in text.splitlines()[:SNIFF_LINES]]
    lines = [ln for ln in lines if ln and not ln.startswith(COMMENTS)]
    if len(text) >= 8000 and len(lines) > 1:
        lines.pop()  # cut short by the sniff
    if not lines or lines[0].startswith(("{", "[")):
        return False  # (JSON)
    folded = [ln for ln in lines if FOLDED_LINE.match(ln)]
    return len(folded) >= FOLDED_MOST * len(lines) and any(";" in ln for ln in folded)


def stack_file_kind(path: Path) -> str | None:
    """ "perf script", "vtune", "folded", or None (another format: a trace or an export)."""
    from pinchpoint.ingest.perf_script import looks_like_perf_script
    from pinchpoint.ingest.vtune import looks_like_vtune_csv

    if not path.is_file() or is_sqlite(path):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError:
        return None
    if looks_like_perf_script(head):
        return "perf script"
    if looks_like_vtune_csv(head):
        return "vtune"
    return "folded" if is_folded(path) else None
