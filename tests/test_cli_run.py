"""`pinchpoint run` end to end on tiny real programs: launch forms, exit codes, crashes, kills, output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

PINCHPOINT = [sys.executable, "-m", "pinchpoint"]

TRAIN = """
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

def main(steps, mode):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * 8, 32), torch.randint(0, 4, (steps * 8,)))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(DataLoader(data, batch_size=8)):
        if i == 12 and mode == "raise":
            raise RuntimeError("planted failure")
        if i == 12 and mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if i == 12 and mode == "own-term":
            signal.signal(signal.SIGTERM, lambda *_: print("handled", flush=True))
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if i == 12 and mode in ("term", "own-term"):
            os.kill(os.getpid(), signal.SIGTERM)  # (as torchrun ends a rank, a scheduler a job)
            time.sleep(0.5)
        opt.step()
    print("trained", steps, "steps")
    sys.stdout.flush()

if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "ok")
"""


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PINCHPOINT_RUN_DIR", None)
    return subprocess.run(
        [*PINCHPOINT, *args], cwd=cwd, capture_output=True, text=True, input=stdin, timeout=180, env=env
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_script_runs_unchanged_and_report_is_written(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(["run", "-o", str(out), "--json", str(tmp_path / "copy.json"), str(script), "20"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "trained 20 steps\n"  # the program's stdout, byte for byte
    report = json.loads((out / "report.json").read_text())
    assert json.loads((tmp_path / "copy.json").read_text()) == report
    assert report["schema"] == "pinchpoint.report/1"
    assert report["run"]["exit_code"] == 0
    assert report["steps"]["kind"] == "train"
    assert report["steps"]["total"] == 20
    assert abs(sum(report["breakdown"].values()) - 1.0) < 0.01
    assert report["environment"]["torch"]["version"].startswith("2.")
    assert report["environment"]["dataloader"]["num_workers"] == 0
    assert "Where a step's time goes" in res.stderr
    assert "Traceback" not in res.stderr


def test_module_form_and_dash_dash_form(script: Path, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    res = _run(["run", "-q", "-o", str(tmp_path / "m"), "-m", "pkg.train", "10"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "m" / "report.json").read_text())["steps"]["total"] == 10
    res = _run(["run", "-q", "-o", str(tmp_path / "d"), "--", sys.executable, str(script), "10"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "d" / "report.json").read_text())["steps"]["total"] == 10


def test_program_ending_inside_the_op_window_keeps_its_exit_code(script: Path, tmp_path: Path) -> None:
    # The window (steps 5-7) is still open when the 6-step program exits: a profiler left running into
    # interpreter teardown used to crash the program with SIGSEGV (exit 139).
    out = tmp_path / "run"
    res = _run(["run", "-q", "-o", str(out), "--opwindow", "5:3", str(script), "6"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "trained 6 steps\n"
    assert (out / "ranks" / "rank0" / "opwindow.json").exists()
    assert json.loads((out / "report.json").read_text())["run"]["exit_code"] == 0


def test_missing_script_is_one_clear_line(tmp_path: Path) -> None:
    res = _run(["run", "no_such_train.py"], tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "no such script: no_such_train.py" in res.stderr
    assert not (tmp_path / "pinchpoint-runs").exists()


def test_program_that_raises_keeps_exit_code_and_partial_report(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(["run", "-o", str(out), str(script), "40", "raise"], tmp_path)
    assert res.returncode == 1
    assert "planted failure" in res.stderr  # the program's own traceback is the program's business
    assert "pinchpoint" in res.stderr and "partial report" in res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["exit_code"] == 1
    assert report["steps"]["total"] >= 12


def test_sigkill_leaves_partial_report_and_nonzero_exit(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(["run", "-o", str(out), str(script), "40", "kill"], tmp_path)
    assert res.returncode == 128 + 9
    assert "SIGKILL" in res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["signal"] == "SIGKILL"
    assert report["steps"]["total"] == 12  # every finished step survived the kill
    # and the report can be rebuilt from the directory alone
    again = _run(["report", "--no-color", str(out)], tmp_path)
    assert again.returncode == 0, again.stderr
    assert "SIGKILL" in again.stdout


def test_sigterm_keeps_the_unfinished_step_and_the_stack_samples(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(["run", "-o", str(out), str(script), "40", "term"], tmp_path)
    assert res.returncode == 128 + 15, res.stderr[-2000:]  # ended as SIGTERM ends it
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["signal"] == "SIGTERM" and report["steps"]["total"] == 12
    steps = [json.loads(x) for x in (out / "ranks" / "rank0" / "steps.jsonl").read_text().splitlines()]
    assert steps[-1]["partial"] and steps[-1]["step"] == 12  # its forward and backward, kept
    assert list(out.glob("pystacks-*.json"))  # written at the signal, not lost with atexit


def test_a_programs_own_sigterm_handler_is_left_to_it(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run(["run", "-o", str(out), str(script), "40", "own-term"], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == "handled\ntrained 40 steps\n"


def test_existing_run_dir_needs_force(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    res = _run(["run", "-o", str(out), str(script), "5"], tmp_path)
    assert res.returncode == 2
    assert "--force" in res.stderr
    assert (out / "keep.txt").exists()


def test_report_on_a_missing_dir_is_one_line(tmp_path: Path) -> None:
    res = _run(["report", str(tmp_path / "nope")], tmp_path)
    assert res.returncode == 3
    assert res.stderr.startswith("pinchpoint: error: no run directory")
    assert "Traceback" not in res.stderr


def test_api_profile_writes_same_run_directory(tmp_path: Path) -> None:
    code = """
import torch, pinchpoint
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with pinchpoint.profile(out="api-run", print_report=False) as prof:
    for _ in range(15):
        opt.zero_grad()
        model(torch.randn(8, 16)).sum().backward()
        opt.step()
        prof.step()
on_disk = prof.report.from_dict(__import__("json").load(open("api-run/report.json")))
print(prof.report.steps.kind, prof.report.steps.total, on_disk.findings == prof.report.findings)
"""
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "explicit 15 True"


def test_the_package_docstrings_example_runs(tmp_path: Path) -> None:
    """`pinchpoint.profile()` as the package's docstring shows it: the report is a typed object."""
    import pinchpoint

    example = textwrap.dedent(pinchpoint.__doc__.split("In code::", 1)[1])  # type: ignore[union-attr]
    code = (
        "import torch\n"
        "model = torch.nn.Linear(64, 64)\n"
        "loader = [torch.randn(8, 64) for _ in range(20)]\n"
        "def train_step(batch):\n"
        "    sum(i * i for i in range(30_000))  # the loop's own Python: a finding to print\n"
        "    model(batch).sum().backward()\n"
        f"{example}"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PINCHPOINT_NO_HISTORY": "1"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    title = res.stdout.strip().splitlines()[-1]
    findings = json.loads((tmp_path / "runs" / "exp1" / "report.json").read_text())["findings"]
    assert title == findings[0]["title"]


def test_after_a_profile_block_nothing_more_is_recorded(tmp_path: Path) -> None:
    """The hooks stay installed after `with pinchpoint.profile()`, inert: a DataLoader worker forked
    later used to become a recording worker and write its fetches into the block's closed run directory,
    and the program's own fetches buffered in the agent for the rest of its life."""
    code = """
import os, torch, pinchpoint
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with pinchpoint.profile(out="api-run", print_report=False) as prof:
    for x, y in DataLoader(data, batch_size=4):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
from pinchpoint.capture import agent
kept = prof._agent
files = sorted((p.name, p.stat().st_size) for p in os.scandir("api-run/ranks/rank0"))
for loader in (DataLoader(data, batch_size=4, num_workers=2), DataLoader(data, batch_size=4)):
    for x, y in loader:
        model(x)
after = sorted((p.name, p.stat().st_size) for p in os.scandir("api-run/ranks/rank0"))
print(files == after, len(kept.fetches._lines), kept.role)
"""
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "0", "off"]


DDP = """
import time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(12 * 8, 32), torch.randint(0, 4, (12 * 8,)))
for x, y in DataLoader(data, batch_size=8, num_workers=1):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
time.sleep(0.05)  # gloo frees the last collective with the GIL (see examples/ddp_straggler.py)
"""


def test_torchrun_captures_every_rank_and_its_loader_workers(tmp_path: Path) -> None:
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "run"
    res = _run(["run", "-q", "-o", str(out), "--", str(torchrun), "--nproc_per_node=2", "ddp.py"], tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["world_size"] == 2
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    for rank in (0, 1):
        rank_dir = out / "ranks" / f"rank{rank}"
        assert report["ranks"][rank]["steps"]["total"] == 12
        mains = list(rank_dir.glob("process-*.json"))
        assert len(mains) == 1  # torchrun's own agent process is not mistaken for a rank
        fetchers = list(rank_dir.glob("fetch-*.jsonl"))
        assert len(fetchers) == 1
        assert (
            fetchers[0].name != f"fetch-{json.loads(mains[0].read_text())['pid']}.jsonl"
        )  # fetched in the worker


HANG = """
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

def read_next_shard():  # rank 1 hangs here after 8 steps (a stuck read, a lock never released)
    while True:
        time.sleep(0.2)

for step in range(30):
    model(torch.randn(16, 64)).square().mean().backward()
    if rank == 1 and step == 8:
        read_next_shard()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
"""


def test_a_hung_collective_is_named_with_the_rank_that_held_it(tmp_path: Path) -> None:
    """Rank 1 stops joining the all-reduce; rank 0 waits in it until gloo's 15 s timeout ends the run.
    The report says the run stopped making steps, who waited where, and names rank 1's code."""
    (tmp_path / "hang.py").write_text(HANG)
    torchrun = Path(sys.executable).with_name("torchrun")
    out = tmp_path / "run"
    res = _run(["run", "-q", "-o", str(out), "--", str(torchrun), "--nproc_per_node=2", "hang.py"], tmp_path)
    assert res.returncode != 0, res.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    first = report["findings"][0]
    assert first["id"] == "run.stalled", [f["id"] for f in report["findings"]]
    assert "for rank 1" in first["title"] and first["ranks"] == [0, 1]
    said = " ".join(first["evidence"])
    assert "Rank 0 made 8 steps, then waited" in said and "all_reduce" in said, said
    assert "read_next_shard (hang.py:10)" in said, said


def test_ctrl_c_still_writes_a_report(script: Path, tmp_path: Path) -> None:
    import signal
    import time

    slow = tmp_path / "slow.py"
    slow.write_text(TRAIN.replace("opt.step()", "opt.step(); time.sleep(0.05)"))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*PINCHPOINT, "run", "-o", str(out), str(slow), "400"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
        # and Ctrl-C's default action, as a terminal gives it: a shell's background job (`cmd &`)
        # inherits SIGINT ignored, and so would the program
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    steps = out / "ranks" / "rank0" / "steps.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not steps.exists() or steps.read_text().count("\n") < 8):
        time.sleep(0.1)
    seen = steps.read_text().count("\n") if steps.exists() else 0
    running = proc.poll() is None
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group gets SIGINT
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, (seen, running, err[-3000:])
    assert "KeyboardInterrupt" in err
    report = json.loads((out / "report.json").read_text())
    assert report["steps"]["total"] >= 8
    assert "Traceback" not in err.split("KeyboardInterrupt")[-1]  # nothing of ours after the program's


def test_sigint_to_pinchpoint_alone_stops_the_program_and_writes_a_report(
    script: Path, tmp_path: Path
) -> None:
    """Outside a terminal (a supervisor, `timeout`, a notebook's interrupt) a SIGINT sent to the pinchpoint
    process alone reaches the program, once: it ends as Ctrl-C ends it and the report is written."""
    import signal
    import time

    slow = tmp_path / "slow.py"
    slow.write_text(TRAIN.replace("opt.step()", "opt.step(); time.sleep(0.05)"))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [*PINCHPOINT, "run", "-o", str(out), str(slow), "400"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    steps = out / "ranks" / "rank0" / "steps.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not steps.exists() or steps.read_text().count("\n") < 8):
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGINT)  # pinchpoint's own pid: not its process group
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and err.count("KeyboardInterrupt") == 1, err[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["steps"]["total"] >= 8 and report["steps"]["total"] < 400


def test_results_are_unchanged_by_profiling(tmp_path: Path) -> None:
    """The op window and its probes run inside the program: they must not touch its random streams."""
    code = TRAIN.replace('print("trained", steps, "steps")', "print(torch.rand(4).tolist(), loss.item())")
    (tmp_path / "seeded.py").write_text(code)
    bare = subprocess.run([sys.executable, "seeded.py", "16"], cwd=tmp_path, capture_output=True, text=True)
    profiled = _run(["run", "-q", "-o", str(tmp_path / "run"), "seeded.py", "16"], tmp_path)
    assert bare.returncode == 0 and profiled.returncode == 0, profiled.stderr
    assert (tmp_path / "run" / "ranks" / "rank0" / "probes.json").is_file()  # the window and probes did run
    assert profiled.stdout == bare.stdout
