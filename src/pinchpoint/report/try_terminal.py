"""`pinchpoint try`'s table: each fix, how it was applied, measured against predicted, what leads after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO


def _x(value: float | None) -> str:
    return f"×{value:.2f}" if value is not None else "-"


def _measured(row: Mapping[str, Any]) -> str:
    if row["speedup"] is None:
        return "-"
    low, high = row["interval"] or (0.0, 0.0)
    verdict = "" if row["significant"] else " (noise)"
    slower = " slower" if row["significant"] and row["speedup"] < 1 else ""
    pairs = " (2 pairs)" if row.get("pairs", 1) > 1 else ""
    return f"{_x(row['speedup'])} [{low:.2f}-{high:.2f}]{verdict}{slower}{pairs}"


def render_try(doc: Mapping[str, Any], baseline: Mapping[str, Any], out: TextIO) -> None:
    steps = baseline.get("steps") or {}
    median = steps.get("median_ms")
    head = f"baseline: {doc['baseline']}"
    if median is not None:
        head += f" · median step {median:.4g} ms"
    lead = (baseline.get("findings") or [{}])[0].get("id")
    if lead:
        head += f" · leading: {lead}"
    print(f"pinchpoint try  {' '.join(doc['command'])}", file=out)
    print(head + f" · {doc['steps']} steady steps a run", file=out)
    print(file=out)
    rows = [("finding", "fix", "measured (99% interval)", "predicted", "leads after")]
    notes: list[str] = []
    for r in doc["tried"]:
        if r["cannot"] is not None:
            rows.append((r["id"], "not applied", "-", _x(r["predicted"]), "-"))
            snippet = "".join(f"\n      {line}" for line in (r["snippet"] or "").splitlines())
            notes.append(f"{r['id']}: {r['cannot']}{snippet}")
            continue
        if r["error"] is not None:
            rows.append((r["id"], r["fix"], "failed", _x(r["predicted"]), "-"))
            notes.append(f"{r['id']} ({r['fix']}): {r['error']}")
            continue
        rows.append((r["id"], r["fix"], _measured(r), _x(r["predicted"]), r["next_limit"] or "-"))
        again = (
            "; the first baseline/trial pair was in doubt (noise, a wide interval, or far from the "
            "prediction), so both ran once more and the measurement pools the two pairs"
            if r.get("pairs", 1) > 1
            else ""
        )
        notes.append(f"{r['id']} ({r['fix']}): applied as {r['applied_how']}{again}")
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
    writes = doc.get("cwd_writes") or {}
    if writes.get("count"):
        names = ", ".join(writes["files"][:5]) + (", ..." if writes["count"] > 5 else "")
        notes.append(
            f"the runs wrote {writes['count']} file(s) under the working directory, as the program "
            f"does (no scratch copy): {names}"
        )
    if notes:
        print(file=out)
        for n in notes:
            print(f"  • {n}", file=out)
