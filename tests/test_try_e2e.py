"""`pinchpoint try` on the planted examples: the fix pinchpoint applies, without touching the example's
code, measures what the example's own `--fix` measured on this machine kind (examples/TRUTH.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.pipeline import try_fix
from programs import CONTENDED_CORES, EXAMPLES, foreign_cores
from truth import machine_truth

pytestmark = pytest.mark.e2e

TRY_TOLERANCE = 0.20
"""The issue's bar: within 20% of the example's own fix."""
STEPS = try_fix.DEFAULT_STEPS
"""The default: fewer steps let a slow stretch of this shared machine decide the ratio (12 steps read
×0.98 for a fix that measures ×1.2–1.5)."""


def _try(
    example: str, fix: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    out = tmp_path / "runs"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "try", "--fix", fix, "--steps", str(STEPS), "-o", str(out), "--",
         sys.executable, str(EXAMPLES / f"{example}.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env,
    )  # fmt: skip
    if res.returncode != 0 and (out / "baseline" / "report.json").is_file():
        baseline = json.loads((out / "baseline" / "report.json").read_text())
        contended = foreign_cores(baseline) >= CONTENDED_CORES
        may_vanish = fix.startswith("cpu.") or 'LOADED = "shrinks' in (EXAMPLES / f"{example}.py").read_text()
        if contended and may_vanish and "no finding" in res.stderr:
            # Beside a busy process the baseline may not show the planted cause (sixteen threads are
            # not slower than two when another process holds a core; a fixed cost per step shrinks
            # below its threshold as the step stretches): nothing to try is the answer.
            return res, None
    assert res.returncode == 0, res.stderr[-3000:]
    return res, json.loads((out / "try.json").read_text())


@pytest.mark.parametrize(
    ("example", "finding"),
    [
        ("cpu_oversubscription", "cpu.oversubscription"),
        ("allocator_churn", "memory.pressure"),
        ("input_fetch", "input.fetch"),
        ("io_checkpoint", "io.checkpoint"),
    ],
)
def test_the_applied_fix_measures_what_the_examples_own_fix_measured(
    example: str, finding: str, tmp_path: Path
) -> None:
    res, doc = _try(example, finding, tmp_path)
    if doc is None:
        return
    (row,) = doc["tried"]
    assert row["id"] == finding and row["applied"], row
    assert row["speedup"] is not None and row["steps"] >= STEPS - 1, row
    assert "×" in res.stdout and row["fix"] in res.stdout  # the table
    runs = [Path(doc["baseline"]), Path(row["run_dir"])]
    if row["pairs"] == 2:  # the first pair was in doubt: both ran again, and the row pools them
        runs += [runs[0].with_name("baseline-again"), runs[1].with_name(runs[1].name + "-again")]
    reports = [json.loads((r / "report.json").read_text()) for r in runs]
    if max(foreign_cores(r) for r in reports) >= CONTENDED_CORES:
        return  # the truth was measured on an idle machine
    truth = machine_truth(what=0)[example]["--fix"]
    assert abs(row["speedup"] / truth - 1) <= TRY_TOLERANCE, (row, truth)
