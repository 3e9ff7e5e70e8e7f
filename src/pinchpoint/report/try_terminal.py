"""`pinchpoint try`'s table: each fix, how it was applied, measured against predicted, what leads after."""

from __future__ import annotations

from typing import TextIO

from pinchpoint.report.report_doc import ReportDoc
from pinchpoint.report.try_doc import CwdWrites, TriedFix, TryDoc

DOUBTS = {
    "noise": "not significant",
    "wide": "its 99% interval was wider than ×1.25",
    "below": "below the best of the fixes it stacks",
    "far": "more than ×1.25 from the prediction",  # pipeline/try_fix.DOUBT_AGREE
}


def _x(value: float | None) -> str:
    return f"×{value:.2f}" if value is not None else "-"


def _measured(row: TriedFix, served: bool = False) -> str:
    if row.speedup is None:
        return "-"
    low, high = row.interval or (0.0, 0.0)
    verdict = "" if row.significant else " (noise)"
    slower = " slower" if row.significant and row.speedup < 1 else ""
    pairs = " (2 pairs)" if row.pairs > 1 else ""
    if row.whole_run:
        pairs = f" (whole runs, {row.pairs} pairs)"
    if row.whole_run and served:
        pairs = f" (under load, {row.pairs} pairs)"
    return f"{_x(row.speedup)} [{low:.2f}-{high:.2f}]{verdict}{slower}{pairs}"


def render_try(doc: TryDoc, baseline: ReportDoc, out: TextIO) -> None:
    median = baseline.steps.median_ms
    base_id = doc.baseline_history_id
    head = f"baseline: {doc.baseline}" + (f" (#{base_id})" if base_id is not None else "")
    if doc.load is not None and baseline.serving is not None:
        head += f" · {baseline.serving.throughput_rps:.1f} requests answered a second under {doc.load}"
    elif median is not None:
        head += f" · median step {median:.4g} ms"
    lead = baseline.findings[0].id if baseline.findings else None
    if lead:
        head += f" · leading: {lead}"
    print(f"pinchpoint try  {' '.join(doc.command)}", file=out)
    print(head + ("" if doc.load is not None else f" · {doc.steps} steady steps a run"), file=out)
    print(file=out)
    rows = [("finding", "fix", "measured (99% interval)", "predicted", "leads after")]
    notes: list[str] = []
    for r in doc.tried:
        if r.cannot is not None:
            rows.append((r.id, "not applied", "-", _x(r.predicted), "-"))
            snippet = "".join(f"\n      {line}" for line in (r.snippet or "").splitlines())
            notes.append(f"{r.id}: {r.cannot}{snippet}")
            continue
        if r.error is not None:
            rows.append((r.id, r.fix, "failed", _x(r.predicted), "-"))
            notes.append(f"{r.id} ({r.fix}): {r.error}")
            continue
        rows.append((r.id, r.fix, _measured(r, doc.load is not None), _x(r.predicted), r.next_limit or "-"))
        again = (
            f"; the first baseline/trial pair was in doubt ({DOUBTS.get(r.doubt or '', 'noise')}), "
            "so both ran once more and the measurement pools the two pairs"
            if r.pairs > 1 and not r.whole_run
            else f"; the baseline and the trial each served {doc.load} twice (baseline, trial, trial, baseline), "
            "their requests answered a second compared: the interval is the two pairs' extremes"
            if r.whole_run and doc.load is not None
            else "; the baseline and the trial each ran to the program's end twice (baseline, trial, trial, "
            "baseline), their program times compared: the interval is the two pairs' extremes"
            if r.whole_run
            else ""
        )
        notes.append(f"{r.id} ({r.fix}): applied as {r.applied_how}{again}{_ran(doc, r)}")
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)
    if doc.baseline_steps < doc.steps:
        notes.insert(
            0, f"the baseline ended after {doc.baseline_steps} steady steps of the {doc.steps} asked"
        )
    notes.extend(_writes(doc.cwd_writes))
    if notes:
        print(file=out)
        for n in notes:
            print(f"  • {n}", file=out)


def _ran(doc: TryDoc, row: TriedFix) -> str:
    """The trial's history id (for `pinchpoint diff`), and whether it ran short of the steps asked."""
    text = ""
    if row.stacked and row.predicted is not None and row.interval is not None:
        low, high = row.interval[0], row.interval[-1]
        verdict = (
            "more than that: they help each other"
            if low > row.predicted
            else "less than that: they overlap"
            if high < row.predicted
            else "about that"
        )
        how = row.stacked_how or "the fixes' own gains multiplied"
        text += f"; predicted ×{row.predicted:.2f} from {how}; together gave {verdict}"
    if row.not_again:
        text += f"; {row.not_again}"
    if row.steps and row.steps < doc.steps * row.pairs:
        text += f"; it ended after {row.steps} steady steps of the {doc.steps} asked"
    base, run = doc.baseline_history_id, row.history_id
    if run is not None:
        text += f"; recorded as #{run}" + (f" (`pinchpoint diff #{base} #{run}`)" if base is not None else "")
    return text


def _names(files: tuple[str, ...], count: int) -> str:
    return ", ".join(files[:5]) + (", ..." if count > 5 else "")


def _writes(writes: CwdWrites | None) -> list[str]:
    """Where the runs' own outputs went: the baseline's into the working directory (as the program
    writes them), the trials' into scratch copies of it."""
    lines = []
    if writes is not None and writes.count:
        if writes.scratch:
            where = (
                f"; the other runs ran in scratch copies of it ({writes.scratch_dir}), so their "
                "outputs are there and your files are as the baseline left them"
            )
        elif writes.reused:
            where = " (no scratch copy: the baseline was recorded earlier, so what it writes is not known)"
        else:
            where = " (the baseline wrote none, so no scratch copy was made)"
        lines.append(
            f"the runs wrote {writes.count} file(s) under the working directory, as the program "
            f"does: {_names(writes.files, writes.count)}{where}"
        )
    if writes is not None and writes.leaked_count:
        lines.append(
            f"the scratch runs still wrote {writes.leaked_count} file(s) under the working "
            f"directory, through directories the baseline did not write: "
            f"{_names(writes.leaked or (), writes.leaked_count)}"
        )
    return lines
