"""Verify a fix with real runs: the two-cause example before and after fixing its input, recorded in
a real history database; `pinchpoint diff` says it is faster and that the bottleneck moved to the
other cause; the CI gate fails the really slower run and passes a rerun of the same program (noise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "two_causes.py"


def _pp(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_NO_HISTORY"}
    env["PINCHPOINT_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", *args], capture_output=True, text=True, timeout=300, env=env
    )
    if check:
        assert proc.returncode in (0, 1), proc.stderr
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    tmp = tmp_path_factory.mktemp("diff")
    home = tmp / "home"
    dirs = {}
    for name, extra in (("planted", []), ("fixed", ["--fix", "input"]), ("planted_again", [])):
        dirs[name] = tmp / name
        proc = _pp(
            home,
            "run",
            "-q",
            "--opwindow",
            "off",
            "-o",
            str(dirs[name]),
            str(EXAMPLE),
            "--steps",
            "100",
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        assert "recorded as #" in proc.stderr
    return home, dirs


def test_runs_are_listed_by_id(runs: tuple[Path, dict[str, Path]]) -> None:
    home, _ = runs
    out = _pp(home, "runs", "--no-color").stdout
    assert "#1" in out and "#3" in out and "input.fetch" in out and "host.python" in out
    shown = _pp(home, "show", "#1", "--no-color").stdout
    assert "input.fetch" in shown


def test_fixing_one_cause_is_faster_and_the_bottleneck_moves(
    runs: tuple[Path, dict[str, Path]], tmp_path: Path
) -> None:
    home, dirs = runs
    out = tmp_path / "diff.json"
    proc = _pp(home, "diff", "#1", str(dirs["fixed"]), "--json", str(out), "--no-color")
    d = json.loads(out.read_text())
    assert d["schema"] == "pinchpoint.diff/1"
    assert d["significant"] is True and d["speedup"] > 1.3, d
    assert (d["before_top"], d["after_top"], d["shifted"]) == ("input.fetch", "host.python", True)
    assert d["environment_differences"] == []
    assert "The bottleneck moved" in proc.stdout


def test_the_gate_fails_a_slower_run_and_passes_a_noisy_one(runs: tuple[Path, dict[str, Path]]) -> None:
    # Two runs of one unchanged program on this 2-core machine differ by up to ~11% (decision 21), so
    # the gate allows 15%: the planted run is 60-70% slower than the fixed one, a rerun only noise.
    home, dirs = runs
    slower = _pp(home, "check", str(dirs["planted"]), "--baseline", "#2", "--max-regression", "15%")
    assert slower.returncode == 1 and "FAIL" in slower.stderr
    rerun = _pp(home, "check", str(dirs["planted_again"]), "--baseline", "#1", "--max-regression", "15%")
    assert rerun.returncode == 0 and "PASS" in rerun.stderr, rerun.stderr
