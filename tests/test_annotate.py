"""`pinchpoint run --annotate itt|nvtx`: steps and phases as native-profiler ranges.

The ITT test is end to end with a real collector: `tests/itt_collector/collector.c` is built into the
library VTune's would be (loaded by the ITT API inside libtorch through INTEL_LIBITTNOTIFY64) and logs
every task it receives. The ranges must nest properly on the training thread, cover every recorded
step, and begin and end when steps.jsonl says the step and its phases did."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pinchpoint.capture.annotate import PREFIX, Annotator

ROOT = Path(__file__).resolve().parents[1]
COLLECTOR = ROOT / "tests" / "itt_collector" / "collector.c"
PINCHPOINT = [sys.executable, "-m", "pinchpoint"]


def test_phases_nest_inside_a_lazily_opened_step_and_a_step_end_closes_everything() -> None:
    log: list[str] = []
    a = Annotator(lambda name: log.append("+" + name), lambda: log.append("-"))
    a.begin("data_wait", 0)
    a.end()
    a.begin("forward", 0)
    a.end()
    a.begin("backward", 0)  # left open, as if an exception escaped between begin and end
    a.end_step()
    a.end()  # nothing open: no unmatched pop
    a.begin("forward", 1)
    a.end_step()
    assert log == [
        f"+{PREFIX}step 0", f"+{PREFIX}data_wait", "-", f"+{PREFIX}forward", "-", f"+{PREFIX}backward", "-", "-",
        f"+{PREFIX}step 1", f"+{PREFIX}forward", "-", "-",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs a C compiler for the ITT collector", pytrace=False)
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp("itt") / "libcollector.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(out), str(COLLECTOR)], check=True)
    return out


def _tasks(log: Path) -> dict[int, list[tuple[str, int, int]]]:
    """Per thread: (name, begin ns, end ns) of every task, checking each thread's tasks nest."""
    open_: dict[int, list[tuple[str, int]]] = {}
    done: dict[int, list[tuple[str, int, int]]] = {}
    for line in log.read_text().splitlines():
        kind, tid_s, t_s, *name = line.split(" ", 3)
        tid, t = int(tid_s), int(t_s)
        if kind == "B":
            open_.setdefault(tid, []).append((name[0] if name else "", t))
        else:
            assert open_.get(tid), f"task end without a begin on thread {tid}"
            n, t0 = open_[tid].pop()
            done.setdefault(tid, []).append((n, t0, t))
    assert all(not v for v in open_.values()), "tasks left open at exit"
    return done


def test_itt_tasks_show_every_step_and_its_phases_where_pinchpoint_measured_them(
    collector: Path, tmp_path: Path
) -> None:
    log = tmp_path / "itt.log"
    env = dict(
        os.environ,
        INTEL_LIBITTNOTIFY64=str(collector),
        INTEL_ITTNOTIFY_GROUPS="structure",
        PINCHPOINT_ITT_LOG=str(log),
    )
    run_dir = tmp_path / "run"
    cmd = [*PINCHPOINT, "run", "--annotate", "itt", "--opwindow", "off", "-q", "-o", str(run_dir),
           str(ROOT / "examples" / "healthy.py"), "--steps", "12"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    tasks = _tasks(log)
    ours = {tid: [t for t in ts if t[0].startswith(PREFIX)] for tid, ts in tasks.items()}
    (tid,) = [tid for tid, ts in ours.items() if ts]  # one training thread
    steps = [
        json.loads(line) for line in (run_dir / "ranks" / "rank0" / "steps.jsonl").read_text().splitlines()
    ]
    step_tasks = {
        name.removeprefix(f"{PREFIX}step "): (t0, t1) for name, t0, t1 in ours[tid] if "step " in name
    }
    assert sorted(map(int, step_tasks)) == [s["step"] for s in steps]
    prev_end = 0
    for i, s in enumerate(steps):
        t0, t1 = step_tasks[str(s["step"])]
        # The task holds exactly this step: it opens after the previous one ended and before this step's
        # first phase starts, and closes after this step ends and before the next one's first phase. (No
        # clock tolerance: the collector's first call alone took 3-4 ms on a loaded 2-core machine.)
        first = min(iv[1] for iv in s["intervals"])
        assert prev_end <= t0 <= first, (s["step"], t0, first)
        following = steps[i + 1]["intervals"] if i + 1 < len(steps) else []
        assert s["end_ns"] <= t1 <= min((iv[1] for iv in following), default=t1), (s["step"], t1, s["end_ns"])
        prev_end = t1
        inside = sorted(
            (
                (name.removeprefix(PREFIX), a, b)
                for name, a, b in ours[tid]
                if t0 <= a and b <= t1 and "step " not in name
            ),
            key=lambda t: t[1],
        )
        assert [n for n, _, _ in inside] == [iv[0] for iv in sorted(s["intervals"], key=lambda iv: iv[1])]
        for (name, a, b), iv in zip(inside, sorted(s["intervals"], key=lambda iv: iv[1]), strict=True):
            assert a <= iv[1] and iv[2] <= b <= t1, (name, a, b, iv)


def test_nvtx_without_a_cuda_build_says_so_in_one_line_and_the_run_goes_on(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.version.cuda:
        pytest.skip("a CUDA build of torch can emit NVTX ranges")
    run_dir = tmp_path / "run"
    cmd = [*PINCHPOINT, "run", "--annotate", "nvtx", "--opwindow", "off", "-q", "-o", str(run_dir),
           str(ROOT / "examples" / "healthy.py"), "--steps", "6"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if "--annotate nvtx" in ln]
    assert len(lines) == 1 and "NVTX is not available" in lines[0] and "Traceback" not in proc.stderr
    assert (run_dir / "report.json").exists()
