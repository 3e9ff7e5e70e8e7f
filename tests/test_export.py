"""`pinchpoint export`: a run as a well-formed Chrome trace (Perfetto), its op window merged on the
same clock; the Python stacks for speedscope and as a flame graph."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pinchpoint.ingest.rundir import read_run_dir

DATA = Path(__file__).parent / "data" / "rundirs" / "h200"
OURS = {"step", "phase", "finding", "loader"}

PROGRAM = textwrap.dedent(
    """
    import time, torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self): return 10_000
        def __getitem__(self, i):
            time.sleep(0.0005)
            return torch.randn(32), torch.randint(0, 4, ())

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, (x, y) in enumerate(DataLoader(Slow(), batch_size=16, num_workers=1)):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if step == 40:
            break
    """
)


def _pp(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", *args], capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("export")
    (tmp / "train.py").write_text(PROGRAM)
    _pp("run", "-q", "--stacks", "-o", str(tmp / "run"), str(tmp / "train.py"))
    return tmp / "run"


def _check_well_formed(doc: dict[str, Any]) -> list[dict[str, Any]]:
    events = doc["traceEvents"]
    assert events and doc["displayTimeUnit"] == "ms"
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        assert e["ph"] in ("X", "C", "M", "i", "I", "s", "f", "t"), e
        if e["ph"] == "M":
            assert isinstance(e["name"], str) and isinstance(e.get("args", {}), dict), e
            continue
        assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], (int, str))
        if e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values()), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            if e.get("cat") in OURS:
                tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for key, spans in tracks.items():  # our slices nest on every track: no partial overlaps
        stack: list[float] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, (key, start, end, stack[-1])
            stack.append(end)
    return events


def test_a_cpu_run_exports_steps_phases_fetches_findings_counters_and_its_op_window(
    cpu_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "trace.json"
    _pp("export", str(cpu_run), "--format", "perfetto", "-o", str(out))
    events = _check_well_formed(json.loads(out.read_text()))
    steps = [json.loads(x) for x in (cpu_run / "ranks/rank0/steps.jsonl").read_text().splitlines()]
    by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_cat[e.get("cat", e["ph"])].append(e)
    assert len(by_cat["step"]) == len(steps)
    assert len(by_cat["phase"]) == sum(len(s["intervals"]) for s in steps)
    assert by_cat["loader"] and {e["pid"] for e in by_cat["loader"]} != {by_cat["step"][0]["pid"]}
    report = json.loads((cpu_run / "report.json").read_text())
    assert len(by_cat["finding"]) == len(report["findings"]) > 0
    assert any(e["name"].startswith("cores busy") for e in by_cat["C"])
    # The op census lies inside the steps it profiled: one clock.
    profiled = [e for e in by_cat["step"] if e["args"].get("op_window")]
    ops = by_cat["cpu_op"]
    assert profiled and ops
    assert min(o["ts"] for o in ops) >= profiled[0]["ts"] - 1
    assert max(o["ts"] + o["dur"] for o in ops) <= profiled[-1]["ts"] + profiled[-1]["dur"] + 1


def test_a_cuda_runs_kineto_window_lands_in_its_profiled_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fp32-planted", run)
    out = tmp_path / "trace.json"
    _pp("export", str(run), "--format", "perfetto", "-o", str(out))
    events = _check_well_formed(json.loads(out.read_text()))
    profiled = [e for e in events if e.get("cat") == "step" and e["args"].get("op_window")]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert profiled and kernels
    lo, hi = profiled[0]["ts"], profiled[-1]["ts"] + profiled[-1]["dur"]
    assert all(lo - 1000 <= k["ts"] <= hi + 1000 for k in kernels)  # Kineto's wall clock mapped to ours


def test_stacks_export_as_speedscope_and_flame_graph(cpu_run: Path, tmp_path: Path) -> None:
    speedscope, svg = tmp_path / "s.json", tmp_path / "f.svg"
    _pp("export", str(cpu_run), "--format", "speedscope", "-o", str(speedscope))
    _pp("export", str(cpu_run), "--format", "flamegraph", "-o", str(svg))
    doc = json.loads(speedscope.read_text())
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    assert doc["profiles"] and doc["shared"]["frames"]
    schema = json.loads(
        (Path(__file__).parent / "data" / "speedscope" / "file-format-schema.json").read_text()
    )
    jsonschema.validate(doc, schema)  # speedscope's published schema (its draft-07 $ref to FileFormat.File)
    assert svg.read_text().lstrip().startswith("<svg") or "<svg" in svg.read_text()[:200]


def test_stacks_formats_need_a_run_with_stacks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(DATA / "fp32-planted", run)
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "export", str(run), "--format", "speedscope", "-o", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "--stacks" in proc.stderr and "Traceback" not in proc.stderr


def test_crc32c_matches_the_castagnoli_check_value() -> None:
    from pinchpoint.report.tensorboard import crc32c

    assert crc32c(b"123456789") == 0xE3069283


def test_tensorboard_reads_back_the_scalars_and_the_report(cpu_run: Path, tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    logdir = tmp_path / "tb"
    _pp("export", str(cpu_run), "--format", "tensorboard", "-o", str(logdir))
    ea = accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    # (The steps as read back: each starts after pinchpoint's own bookkeeping, `agent_ns`.)
    steps = read_run_dir(cpu_run).ranks[0].steps
    timed = [s for s in steps if not s.partial and not s.profiled and not s.trial]
    step_times = ea.Scalars("pinchpoint/step_time_ms")
    assert [e.step for e in step_times] == [s.index for s in timed]
    assert all(
        abs(e.value - s.dur_ns / 1e6) < 1e-3 * max(1.0, e.value)
        for e, s in zip(step_times, timed, strict=True)
    )
    tags = ea.Tags()["scalars"]
    assert "pinchpoint/phase/data_wait" in tags and "pinchpoint/phase/forward" in tags
    report = json.loads((cpu_run / "report.json").read_text())
    for f in report["findings"]:
        assert abs(ea.Scalars(f"pinchpoint/finding/{f['id']}")[0].value - f["share"]) < 1e-6
    shares = [ea.Scalars(t)[-1].value for t in tags if t.startswith("pinchpoint/phase/")]
    assert abs(sum(shares) - 1) < 1e-4  # a step's phases add up
    text = ea.Tensors("pinchpoint/report")[0].tensor_proto.string_val[0].decode()
    assert report["findings"][0]["title"] in text
    assert ea.SummaryMetadata("pinchpoint/report").plugin_data.plugin_name == "text"


def test_every_file_format_is_one_renderer_and_export_offers_all_but_the_reports_own() -> None:
    from pinchpoint.report.formats import EXPORT_FORMATS
    from pinchpoint.report.renderers import RENDERERS

    assert set(RENDERERS) == {"json", "html", *EXPORT_FORMATS}
    assert {"perfetto", "speedscope", "flamegraph", "tensorboard"} <= set(EXPORT_FORMATS)


def test_the_text_export_is_what_the_console_printed(cpu_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    _pp("export", str(cpu_run), "--format", "text", "-o", str(out))
    shown = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "report", str(cpu_run), "--no-color"],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    ).stdout
    text = out.read_text()
    assert "\x1b[" not in text, "a file gets no colour codes"
    assert "What holds it back" in text and "input." in text
    strip = lambda s: [line for line in s.splitlines() if not line.startswith("pinchpoint:")]  # noqa: E731
    assert strip(text) == strip(shown)
