"""How close the diagnosis comes to the measured truth: each example under `pinchpoint run`, its planted
finding's share and predicted speedup beside what its `--fix` measured (examples/TRUTH.md).

    .venv/bin/python benchmarks/diagnosis_vs_truth.py [EXAMPLE ...]

Run it on a quiet machine, one program at a time (two PyTorch programs on 2 cores distort each other).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_examples_e2e import FIX_REMOVES, _launch, _planted, _truth  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*")
    args = ap.parse_args()
    truth = _truth()
    names = args.examples or sorted(truth)
    pinchpoint = str(Path(sys.executable).with_name("pinchpoint"))
    print(f"{'example':22} {'finding':22} {'top?':5} {'share':>6} {'truth':>6} {'est. ×':>7} {'truth ×':>8}")
    for name in names:
        script = ROOT / "examples" / f"{name}.py"
        planted = _planted(script)
        launch = _launch(script)  # torchrun for the DDP examples
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
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
                check=True,
                capture_output=True,
            )
            report = json.loads(Path(f"{tmp}/run/report.json").read_text())
        findings = report["findings"]
        by_id = {f["id"]: f for f in findings}
        top = [f["id"] for f in findings[: max(1, len(planted))]]
        if not planted:
            loud = [f"{f['id']}={f['share']:.2f}" for f in findings if not f["id"].startswith("compute.")]
            print(
                f"{name:22} {'(none planted)':22} {'-':5} {'':>6} {'':>6} {'':>7} {'':>8}  other findings: {loud}"
            )
            continue
        for fid in planted:
            fixes = truth[name]
            label = next((k for k, v in FIX_REMOVES.items() if v == fid and k in fixes), "--fix")
            measured = fixes.get(label)
            f = by_id.get(fid)
            share = f"{f['share']:.2f}" if f else "—"
            est = f"{f['estimated_speedup']:.2f}" if f else "—"
            true_x = f"{1 / (1 - measured):.2f}" if measured is not None and measured < 1 else "—"
            true_share = f"{measured:.2f}" if measured is not None else "—"
            print(
                f"{name:22} {fid:22} {'yes' if fid in top else 'NO':5} {share:>6} {true_share:>6} {est:>7} {true_x:>8}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
