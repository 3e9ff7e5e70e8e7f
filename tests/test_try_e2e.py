"""`pinchpoint try` on the planted examples: the fix pinchpoint applies, without touching the example's
code, measures what the example's own `--fix` measured on this machine kind (examples/TRUTH.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pinchpoint.pipeline import try_fix
from programs import EXAMPLES, beside_load, churn_absent, churn_of
from truth import baseline_ms, live_speedups, machine_truth, missing_row

pytestmark = pytest.mark.e2e

TRY_TOLERANCE = 0.20
"""The issue's bar: within 20% of the example's own fix."""
SLOWER_THAN_TRUTH = 1.15
"""A baseline this much slower than the truth's (its reps spread ±5%) ran on a machine in another state."""
PRELOAD_CLEAR = 1.05
"""A preload's truth further than this from x1 has a direction try must not contradict."""
STEPS = try_fix.DEFAULT_STEPS
"""The default: fewer steps let a slow stretch of this shared machine decide the ratio (12 steps read
×0.98 for a fix that measures ×1.2–1.5)."""


def _try(
    example: str, fix: str, tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    out = tmp_path / "runs"
    script = EXAMPLES / f"{example}.py"
    launch = re.search(r'^LAUNCH = "([^"]+)"', script.read_text(), re.M)  # torchrun for the DDP examples
    words = launch.group(1).split() if launch is not None else []
    command = [str(Path(sys.executable).with_name(words[0])), *words[1:]] if words else [sys.executable]
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "try", "--fix", fix, "--steps", str(STEPS), "-o", str(out), "--",
         *command, str(script)],
        cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env,
    )  # fmt: skip
    if res.returncode != 0 and (out / "baseline" / "report.json").is_file():
        baseline = json.loads((out / "baseline" / "report.json").read_text())
        contended = beside_load(baseline)
        truth_ms = baseline_ms(example)
        lighter = truth_ms is not None and baseline["steps"]["median_ms"] < truth_ms / SLOWER_THAN_TRUTH
        may_vanish = fix.startswith("cpu.") or 'LOADED = "shrinks' in (EXAMPLES / f"{example}.py").read_text()
        if (contended or lighter) and may_vanish and "no finding" in res.stderr:
            # Beside a busy process the baseline may not show the planted cause (sixteen threads are
            # not slower than two when another process holds a core; a fixed cost per step shrinks
            # below its threshold as the step stretches): nothing to try is the answer. So too when
            # the plant did not bite in this run: allocator_churn's planted steps read 49.6-59.6 ms in
            # six runs on the avx512_bf16 EPYC (truth 59.3), its bf16 blocks mostly under the 4 MiB
            # threshold it pins; the fast ones churn too little to report.
            return res, None
    assert res.returncode == 0, res.stderr[-3000:]
    return res, json.loads((out / "try.json").read_text())


@pytest.mark.parametrize(
    ("example", "finding"),
    [
        # cpu_oversubscription's threads=2 (an environment variable) is left to benchmarks/try_vs_fix.py
        # and the in-run thread trial (tests/test_thread_trial.py): its 16-thread baseline pairs took
        # ~110 s of CI's 25 minutes.
        # glibc's thresholds only: the preloads are priced by their truth rows and unit tests (CI's 25
        # minutes: the three plans and their second pairs took ~2 minutes)
        ("allocator_churn", "memory.pressure:glibc"),
        # comm_exposed's no_sync() (two torchrun runs a pair, ~80 s of CI's 25 minutes) is measured by
        # benchmarks/try_vs_fix.py against the example's own fix; tests/test_try.py runs the applier
        # on a real DDP model.
        # input_fetch's and io_checkpoint's fixes (num_workers, torch.save less often) are measured by
        # stacked_fixes below, alone and together (CI's 25 minutes); benchmarks/try_vs_fix.py runs all.
    ],
)
def test_the_applied_fix_measures_what_the_examples_own_fix_measured(
    example: str, finding: str, tmp_path: Path
) -> None:
    res, doc = _try(example, finding, tmp_path)
    if doc is None:
        return
    rows = doc["tried"]
    assert rows and all(row["id"] == finding.split(":")[0] for row in rows), rows
    for row in rows:
        if row["cannot"] is not None:  # a malloc that is not installed here says so
            assert row["fix"].endswith(" preload") and "not installed" in row["cannot"], row
            continue
        _check_row(example, doc, row, res.stdout)


def _check_row(example: str, doc: dict[str, Any], row: dict[str, Any], table: str) -> None:
    assert row["applied"], row
    assert row["speedup"] is not None and row["steps"] >= STEPS - 1, row
    assert "×" in table and row["fix"] in table  # the table
    runs = [Path(doc["baseline"]), Path(row["run_dir"])]
    if row["pairs"] == 2:  # the first pair was in doubt: both ran again, and the row pools them
        runs += [runs[0].with_name("baseline-again"), runs[1].with_name(runs[1].name + "-again")]
    reports = [json.loads((r / "report.json").read_text()) for r in runs]
    if any(beside_load(r) for r in reports):
        return  # the truth was measured on an idle machine
    truth_ms, base_ms = baseline_ms(example), reports[0]["steps"]["median_ms"]
    if truth_ms is not None and not truth_ms / SLOWER_THAN_TRUTH <= base_ms <= truth_ms * SLOWER_THAN_TRUTH:
        # ...and in the state its truth rows record. allocator_churn's churn is not there in every run: CI
        # read its baseline at 47.6 ms against the truth's 59.3 (reps 56-60 ms), with the allocator at 13%
        # of it, and glibc's thresholds then measured x0.94 (the truth's own reps: x1.00, x1.22, x1.20).
        return
    churn = [churn_of(r) for r in runs] if example == "allocator_churn" else []
    if churn and any(churn_absent(r) is not None for r in runs[::2]):
        return  # no churn in a baseline: nothing for the fix to remove in that pair (CI once: x0.97)
    if missing_row(example) is not None:
        pytest.skip(missing_row(example))  # (what holds anywhere was asserted above)
    truths = machine_truth(what=0)[example]
    if not row["fix"].endswith(" preload"):  # the example's own --fix is the first plan's change
        if abs(row["speedup"] / truths["--fix"] - 1) > TRY_TOLERANCE:
            # The stored row disagrees: a fix's gain drifts between days on these VMs (allocator_churn's
            # glibc fix: x1.18 one day, x1.39 another, try x1.10-1.42), so it is measured again now.
            predicted = row.get("predicted")
            if (
                churn
                and isinstance(predicted, (int, float))
                and abs(row["speedup"] / predicted - 1) <= TRY_TOLERANCE
            ):
                # try measured what this run's own faults priced, and the bare program gains more: its
                # plant bit less under pinchpoint (CI three times in one afternoon: x1.07, x1.10, x1.07
                # measured, x1.12, x1.21, x1.16 priced from the run's faults, x1.35, x1.51, x1.51 bare,
                # each bare measurement ~90 s of CI's 25 minutes). Then the cause was the allocator
                # trial setting back 8 MiB of trim threshold (decision 123); the plant's gain also
                # drifts between days (x1.25-1.39 bare). Not a wrong measurement by try.
                pytest.skip(
                    f"allocator_churn bit less under pinchpoint: try x{row['speedup']:.2f}, priced "
                    f"x{predicted:.2f} from this run's faults {churn}, stored bare x{truths['--fix']:.2f}"
                )
            now = live_speedups(example, ["--fix"])["--fix"]
            assert abs(row["speedup"] / now - 1) <= TRY_TOLERANCE, (row, truths["--fix"], now, churn)
        return
    # A malloc preload is no example's own fix (the 20% bar is for those): its truth row says which
    # way it goes here, and try must not measure the other way (jemalloc: x0.85 truth, x1.01 noise seen).
    truth = truths.get(row["fix"])
    if truth is None:
        return  # not measured on this machine kind (examples/measure_truth.py)
    if truth < 1 / PRELOAD_CLEAR:
        assert not (row["significant"] and row["speedup"] > 1), (row, truth)
    elif truth > PRELOAD_CLEAR:
        assert not (row["significant"] and row["speedup"] < 1), (row, truth)


def test_fix_all_stacks_the_fixes_that_paid_and_names_what_leads_after(tmp_path: Path) -> None:
    """examples/stacked_fixes.py: a latency-bound fetch and a checkpoint every step, both fixed by
    `try` without code, then together; its checkpoints go to checkpoints/ under the working directory."""
    res, doc = _try("stacked_fixes", "all", tmp_path)
    assert doc is not None
    rows = {r["id"]: r for r in doc["tried"]}
    fetch, ckpt = rows["input.fetch"], rows["io.checkpoint"]
    for row in (fetch, ckpt):
        assert row["applied"] and row["speedup"] is not None, row
    stacked = [r for r in doc["tried"] if {"input.fetch", "io.checkpoint"} <= set(r["id"].split("+"))]
    if not (fetch["significant"] and ckpt["significant"]):
        # Only the fixes that paid are stacked. Each pays on a machine in its truth's state; on a
        # slower or busier one a fixed cost's share shrinks and its gain may drown in the noise (CI
        # once found no row to stack): then nothing is stacked, and the reason is the machine's.
        baseline = json.loads((Path(doc["baseline"]) / "report.json").read_text())
        truth_ms = baseline_ms("stacked_fixes")
        other_state = beside_load(baseline) or (
            # (no truth row on this kind: nothing says the fixes pay here)
            truth_ms is None or baseline["steps"]["median_ms"] > SLOWER_THAN_TRUTH * truth_ms
        )
        assert other_state and not stacked, (rows, baseline["steps"]["median_ms"], truth_ms)
        for row in (fetch, ckpt):  # a pair that left nothing significant ran again (A B B A)
            assert row["significant"] or (row["pairs"] == 2 and row["doubt"] == "noise"), row
        # skipping a checkpoint only takes work away: try must not measure it slower for sure
        assert not (ckpt["significant"] and ckpt["speedup"] < 1), ckpt
        if not beside_load(baseline):
            assert fetch["significant"] or ckpt["significant"], rows
        # Beside a busy process two pairs of 30 steps may resolve neither (the loaded suite read
        # workers x0.72 [0.63-1.25] and checkpoint x0.93 [0.65-2.03] on 122 ms steps): in doubt, said so.
        return
    (together,) = stacked
    assert together["applied"] and together["speedup"] is not None and together["significant"], together
    assert together["speedup"] > max(fetch["speedup"], ckpt["speedup"]), rows  # the gains stack
    # What leads after is not what was fixed, or only its remainder (a worker's batch transfer: 6% of
    # a 37 ms step on a fast machine, where memory.pressure's preload paid too and was stacked)
    nxt = together["next_limit"]
    assert nxt, together
    if nxt.startswith(("input.", "io.")):
        left = re.search(r"\((\d+)%\)", nxt)
        assert left is not None and int(left.group(1)) < 10, together
    assert "together" in res.stderr and together["next_limit"] in res.stdout
    # the trials wrote their checkpoints into scratch copies, the baseline into the working directory
    writes = doc["cwd_writes"]
    assert writes["scratch"] and "checkpoints/last.pt" in writes["files"] and writes["leaked_count"] == 0
    assert (
        Path(writes["scratch_dir"]) / Path(together["run_dir"]).name / "checkpoints" / "last.pt"
    ).is_file()
    reports = [json.loads((Path(r["run_dir"]) / "report.json").read_text()) for r in (fetch, ckpt, together)]
    reports.append(json.loads((Path(doc["baseline"]) / "report.json").read_text()))
    if any(beside_load(r) for r in reports):
        return  # the truth was measured on an idle machine
    # ...and at the speed its truth rows record. A slower machine (steal time, a slower clock: no
    # foreign process shows) shrinks the fixed waits' share, so the fixes gain less: CI read the
    # baseline at 175 ms against the truth's 142 and together x1.64 (x1.34 x x1.23 alone) for x2.21.
    truth_ms, base_ms = baseline_ms("stacked_fixes"), reports[-1]["steps"]["median_ms"]
    if truth_ms is not None and base_ms > SLOWER_THAN_TRUTH * truth_ms:
        return
    if missing_row("stacked_fixes") is not None:
        pytest.skip(missing_row("stacked_fixes"))  # (what holds anywhere was asserted above)
    truths = machine_truth(what=0)["stacked_fixes"]
    pairs = [(fetch, "--fix input"), (ckpt, "--fix checkpoint")]
    if together["id"] == "input.fetch+io.checkpoint":  # (the example's own --fix all is these two)
        pairs.append((together, "--fix all"))
    for row, label in pairs:
        assert abs(row["speedup"] / truths[label] - 1) <= TRY_TOLERANCE, (row, label, truths[label])
