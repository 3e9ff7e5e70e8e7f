"""Which files a run wrote under the program's working directory (`pinchpoint try` says so: its runs
write the program's checkpoints and logs as the program would, over the user's own).

A snapshot is each file's (mtime_ns, size) under a directory, leaving out version control, virtual
environments, caches and pinchpoint's own run directories; a directory too large to walk cheaply is
not checked (None)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

MAX_FILES = 20_000
"""Files walked before giving up: a data directory under the cwd would make the walk the cost."""
SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "__pycache__", "node_modules", ".cache"})

Snapshot = dict[str, tuple[int, int]]


def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> Snapshot | None:
    """{relative path: (mtime_ns, size)} of the files under `root`, or None past `MAX_FILES`."""
    skipped = {str(p.resolve()) for p in skip}
    files: Snapshot = {}
    for top, dirs, names in os.walk(root, onerror=lambda _: None):
        dirs[:] = [
            d
            for d in dirs
            if d not in SKIP_DIRS
            and not d.startswith("pinchpoint-runs")
            and str(Path(top, d).resolve()) not in skipped
        ]
        for name in names:
            path = Path(top, name)
            try:
                st = path.lstat()
            except OSError:
                continue
            files[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
            if len(files) > MAX_FILES:
                return None
    return files


def written(
    before: Mapping[str, tuple[int, int]] | None, after: Mapping[str, tuple[int, int]] | None
) -> list[str] | None:
    """Files created or changed between the two snapshots (sorted), None when either is missing."""
    if before is None or after is None:
        return None
    return sorted(p for p, stat in after.items() if before.get(p) != stat)
