"""Tolerant readers for the run directory's JSON files: a missing file or a truncated line becomes a
warning, and values of the wrong type become a default, never an exception."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def load_json(path: Path, warnings: list[str]) -> Any:
    if not path.is_file():
        warnings.append(f"{path.name} is missing")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        warnings.append(f"{path.name} could not be read ({exc.__class__.__name__})")
        return None


def jsonl(path: Path, warnings: list[str]) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        return
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        warnings.append(f"{path.name} could not be read ({exc.strerror})")
        return
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(obj, dict):
            yield obj
        else:
            bad += 1
    if bad:
        where = f"{path.parent.name}/{path.name}" if path.parent.name.startswith("rank") else path.name
        warnings.append(f"{where}: skipped {bad} unreadable line(s) (truncated write?)")


def as_int(v: Any, default: int | None = None) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    return default


def as_float(v: Any, default: float | None = None) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return default


def as_dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None
