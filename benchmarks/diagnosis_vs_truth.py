"""How close the diagnosis comes to the measured truth of this machine: each example under
`pinchpoint run`, and for every fix examples/TRUTH.md measured for it here (its `--fix`, the glibc-tuned
run for memory.pressure, `--workers 2` for the input examples), the finding for the cause that fix
removes: its share, its estimate and how the estimate was obtained, beside what the fix measured.

    .venv/bin/python benchmarks/diagnosis_vs_truth.py [EXAMPLE ...]

Run it on a quiet machine, one program at a time (two PyTorch programs on 2 cores distort each other).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from programs import planted as _planted  # noqa: E402
from test_examples_e2e import FIX_REMOVES, _launch  # noqa: E402
from truth import machine_kind, sections  # noqa: E402


def _cause(label: str, planted: list[str]) -> str:
    """The category a fix label measured: `glibc env (memory.pressure)` names it; the others are the
    planted cause (two_causes: FIX_REMOVES)."""
    if label.endswith(")") and "(" in label:
        return label[label.rindex("(") + 1 : -1]
    return FIX_REMOVES.get(label, planted[0] if planted else "(none)")


def _workers_tried(finding: dict[str, Any]) -> tuple[int, float] | None:
    """(workers, speedup) of the workers trial's evidence line, if the finding has one."""
    for line in finding.get("evidence") or []:
        m = re.search(r"num_workers=(\d+) \(the program's own batches.*?×([0-9.]+)", str(line))
        if m:
            return int(m.group(1)), float(m.group(2))
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*")
    args = ap.parse_args()
    kind = machine_kind()
    truth = sections().get(kind, {})
    names = args.examples or sorted(truth)
    pinchpoint = str(Path(sys.executable).with_name("pinchpoint"))
    print(f"machine kind: {kind}")
    print(
        f"{'example':20} {'fix measured':28} {'finding':21} {'rank':>4} {'share':>6} {'truth':>6} "
        f"{'est. ×':>7} {'basis':8} {'truth ×':>8}"
    )
    for name in names:
        script = ROOT / "examples" / f"{name}.py"
        if "PLANTED" not in script.read_text():  # (stacked_fixes: measured by `pinchpoint try`'s tests)
            continue
        planted = _planted(script)
        launch = _launch(script)  # torchrun for the DDP examples
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [
                    pinchpoint,
                    "run",
                    "-q",
                    "-o",
                    f"{tmp}/run",
                    "--",
                    *(launch or [sys.executable]),
                    str(script),
                ],
                cwd=ROOT,
                capture_output=True,
            )
            path = Path(f"{tmp}/run/report.json")
            if not path.is_file():
                print(f"{name:20} pinchpoint run failed ({done.returncode})")
                continue
            report = json.loads(path.read_text())
        findings = [f for f in report["findings"] if f["id"] != "compute.math" or "compute.math" in planted]
        ranks = {f["id"]: i + 1 for i, f in enumerate(findings)}
        by_id = {f["id"]: f for f in findings}
        for label, (speedup, share) in sorted(truth.get(name, {}).items()):
            cause = _cause(label, planted)
            f = by_id.get(cause)
            cells = (
                (
                    str(ranks[cause]),
                    f"{f['share']:.2f}",
                    f"{f['estimated_speedup']:.2f}",
                    f.get("estimate_basis", ""),
                )
                if f
                else ("—", "—", "—", "")
            )
            tried = _workers_tried(f) if f and label.startswith("--workers") else None
            if tried is not None:  # what the workers trial measured, whatever the finding advises
                cells = (cells[0], cells[1], f"{tried[1]:.2f}", f"trial w={tried[0]}")
            print(
                f"{name:20} {label[:28]:28} {cause:21} {cells[0]:>4} {cells[1]:>6} {share:>6.2f} "
                f"{cells[2]:>7} {cells[3]:8} {speedup:>8.2f}"
            )
        if not truth.get(name):
            print(f"{name:20} (no truth on {kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
