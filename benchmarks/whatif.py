"""What-if accuracy: each example's predicted speedup against the speedup its fix measures, and the
predicted next limit against what the fixed run's report says.

    .venv/bin/python benchmarks/whatif.py [EXAMPLE ...]

Every example runs under `pinchpoint run` twice: as planted, and with each of its fixes (the
two-cause example: `--fix input` and `--fix python`). The measured speedup is `pinchpoint diff`'s:
the ratio of the two runs' median step times (both runs carry pinchpoint, so its cost cancels), with
its significance. The predicted one is the planted finding's `estimated_speedup` in the planted run.
"Next" compares the planted finding's `next_limit` (the finding or phase it predicts will hold the
largest share of the step once fixed) with the fixed run's finding of largest share (the report's order
is by predicted gain instead). A fix that removes several planted causes at once is
predicted by adding their savings (each finding's time lives in its own phases). Target (issue 6): within ±25% for at least 80% of
the examples. Run it on a quiet machine: two PyTorch programs on 2 cores distort each other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from pinchpoint.compare.diff import RunSide, diff_runs  # noqa: E402
from pinchpoint.ingest.rundir import read_run_dir  # noqa: E402
from pinchpoint.pipeline.rundir import run_step_ns  # noqa: E402
from test_examples_e2e import FIX_REMOVES, _launch, _planted, _truth  # noqa: E402

TOLERANCE = 0.25


def profile(script: Path, args: list[str], out: Path) -> RunSide:
    launch = _launch(script)
    env = {**os.environ, "PINCHPOINT_NO_HISTORY": "1"}
    subprocess.run(
        [str(Path(sys.executable).with_name("pinchpoint")), "run", "-q", "-o", str(out), "--",
         *(launch or [sys.executable]), str(script), *args],
        cwd=ROOT, check=True, capture_output=True, env=env,
    )  # fmt: skip
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    return RunSide(label=str(out), report=report, step_ns=run_step_ns(read_run_dir(out)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*")
    args = ap.parse_args()
    truth = _truth()
    names = args.examples or sorted(n for n in truth if _planted(ROOT / "examples" / f"{n}.py"))
    print(
        f"{'example':22} {'fix':13} {'finding':22} {'est. ×':>7} {'meas. ×':>8} {'error':>7}  next: predicted / seen"
    )
    hits = total = 0
    for name in names:
        script = ROOT / "examples" / f"{name}.py"
        with tempfile.TemporaryDirectory() as tmp:
            before = profile(script, [], Path(tmp) / "planted")
            by_id = {f["id"]: f for f in before.report["findings"]}
            for label in truth[name]:
                planted = _planted(script)
                fixed = [FIX_REMOVES[label]] if label in FIX_REMOVES else planted
                fid = "+".join(fixed)
                after = profile(script, label.split(), Path(tmp) / label.replace(" ", "_").strip("-"))
                d = diff_runs(before, after)
                f = by_id.get(fid)
                # Several causes fixed at once: their savings add up (each lives in its own phases).
                saved = sum(1 - 1 / by_id[i]["estimated_speedup"] for i in fixed if i in by_id)
                est = 1 / max(1e-9, 1 - saved)
                err = est / d.speedup - 1
                total += 1
                hits += abs(err) <= TOLERANCE
                predicted = (f or {}).get("next_limit") or "—"
                predicted_id = predicted.split(" at ")[0].removeprefix("after this, ") if f else "—"
                after_findings = after.report.get("findings") or []
                seen = max(after_findings, key=lambda g: g["share"])["id"] if after_findings else "none"
                mark = "" if d.test.significant else " (not significant)"
                print(
                    f"{name:22} {label:13} {fid:22} {est:>7.2f} {d.speedup:>8.2f}{mark} {err:>+7.0%}  "
                    f"{predicted_id} / {seen}",
                    flush=True,
                )
    print(f"\nwithin ±{TOLERANCE:.0%}: {hits} of {total} ({hits / max(total, 1):.0%}; target ≥ 80%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
