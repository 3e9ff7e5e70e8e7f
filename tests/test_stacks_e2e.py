"""`pinchpoint run --stacks` on real programs: py-spy samples the program and its DataLoader workers,
the report names the planted function, and the run directory holds a flame graph and a speedscope file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from pinchpoint.capture.stacks import find_py_spy

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy is not installed")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run(tmp_path: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "--stacks-rate", "50", "-o", str(out), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return out, json.loads((out / "report.json").read_text())


def _finding(report: dict[str, Any], fid: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["id"] == fid]
    assert found, f"no {fid} finding: {[f['id'] for f in report['findings']]}"
    return found[0]


def _stack_line(finding: dict[str, Any]) -> str:
    lines = [e for e in finding["evidence"] if e.startswith("Python stacks")]
    assert lines, finding["evidence"]
    return str(lines[0])


def test_host_python_names_the_metrics_function(tmp_path: Path) -> None:
    out, report = _run(tmp_path, str(EXAMPLES / "host_python.py"), "--steps", "40")
    line = _stack_line(_finding(report, "host.python"))
    # the planted per-token metrics loop, at its hottest line, is the first function named; the samples
    # are the training loop's own (its lines), not the imports and data building before it
    assert re.search(
        r"in the loop \(lines \d+-\d+ of \S*examples/host_python\.py\), outside the phases\): python_metrics \(",
        line,
    ), line
    host = report["ranks"][0]["stacks"]["host"]
    assert host["top"][0]["function"].startswith("python_metrics (") and host["top"][0]["share"] > 0.8, host
    assert report["stack_files"] == ["flamegraph.svg", "stacks.speedscope.json"]
    text = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "report", "--no-color", str(out)], capture_output=True, text=True
    )
    assert (
        "Python stacks: flamegraph.svg and stacks.speedscope.json in the run directory"
        in text.stdout + text.stderr
    )
    html = (out / "report.html").read_text()
    assert re.search(r"Where Python spends its time in the loop \(lines \d+-\d+ of \S*host_python\.py", html)
    svg = ET.parse(out / "flamegraph.svg").getroot()
    titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("python_metrics (") for t in titles)
    assert any(t.startswith("training process (pid ") for t in titles)
    speedscope = json.loads((out / "stacks.speedscope.json").read_text())
    assert speedscope["profiles"][0]["type"] == "sampled"
    assert any(f["name"] == "python_metrics" for f in speedscope["shared"]["frames"])


def test_preprocessing_in_dataloader_workers_is_traced_to_the_transform(tmp_path: Path) -> None:
    out, report = _run(tmp_path, str(EXAMPLES / "input_preprocess.py"), "--steps", "60", "--workers", "1")
    loader = report["ranks"][0]["stacks"]["loader"]
    # the per-sample augmentation in the worker, and the numpy call inside it that costs the time
    top = loader["top"][0]
    assert re.fullmatch(r"augment_one \(\S*examples/input_preprocess\.py:\d+\)", top["function"]), loader
    assert top["share"] > 0.5 and "numpy" in (top["calls_into"] or ""), loader
    for finding in report["findings"]:  # whether the wait shows depends on the machine: 1 worker, 2 cores
        if finding["id"].startswith("input."):
            assert "in the loaders): augment_one (" in _stack_line(finding)
    svg = (out / "flamegraph.svg").read_text()
    assert "DataLoader worker 0 (pid " in svg


API_SCRIPT = """
import sys, torch, pinchpoint

def tally(n):  # the program's own Python, between steps
    return sum(i * i for i in range(n))

x = torch.randn(64, 64)
with pinchpoint.profile(out=sys.argv[1], stacks_rate_hz=100, print_report=False) as prof:
    for _ in range(40):
        (x @ x).sum()
        tally(150_000)
        prof.step()
print("done")
"""


def test_python_api_samples_stacks_and_stops_the_sampler(tmp_path: Path) -> None:
    script = tmp_path / "api_prog.py"
    script.write_text(API_SCRIPT)
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, str(script), str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and res.stdout.strip() == "done", res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    host = report["ranks"][0]["stacks"]["host"]
    assert host["top"][0]["function"].startswith("tally (api_prog.py:"), host
    assert (out / "flamegraph.svg").is_file() and (out / "stacks.speedscope.json").is_file()


def test_native_stacks_merge_native_frames_under_the_python_lines(tmp_path: Path) -> None:
    """`run --stacks --native`: py-spy unwinds native frames too, so the flame graph shows the matmul
    kernels under the Python line that called them; the report still names Python lines."""
    out, report = _run(tmp_path, "--native", str(EXAMPLES / "host_python.py"), "--steps", "15")
    assert json.loads((out / "stacks.json").read_text())["native"] is True
    merged = 0
    for line in (out / "stacks.folded").read_text().splitlines():
        frames = line.rsplit(" ", 1)[0].split(";")
        py = [i for i, f in enumerate(frames) if re.search(r"\.py:\d+\)$", f)]
        native = [i for i, f in enumerate(frames) if re.search(r"\.so[.\d]*\)$", f)]
        merged += bool(py and native and max(native) > min(py))
    assert merged > 0  # native frames below Python ones in one stack
    host = report["ranks"][0]["stacks"]["host"]
    assert host["top"][0]["function"].startswith("python_metrics ("), host  # not a .so frame
    svg = ET.parse(out / "flamegraph.svg").getroot()
    titles = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any("libtorch_cpu.so" in t for t in titles), titles[:20]  # the native tail is drawn
    from pinchpoint.ingest.run_stacks import run_stacks

    stacks = run_stacks(out, [])
    assert stacks is not None and stacks.samples
    for sample in stacks.samples:  # the interpreter's own C frames (libc's start, the eval loop) are gone
        python = [i for i, f in enumerate(sample.frames) if not f.native]
        assert python == list(range(len(python))), sample.frames[:4]
