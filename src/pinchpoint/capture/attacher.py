"""`pinchpoint attach PID`: joins a running Python program for a while and leaves it as it was.

The run directory is the one `pinchpoint run` writes, with meta.json's `mode` "attach" and an
`attach` record (docs/run-directory.md). The system sampler (and py-spy with `--stacks`) watch the
process from outside; the agent, put in through gdb (`capture/inject.py`), records steps and phases
from the same hooks as `run`, until this side writes the `detach` file and the agent answers with
`detached-PID.json` (`capture/attached.py`). When the agent cannot be put in (no gdb, gdb failed, the
interpreter never ran it) the process is watched from outside instead (`capture/outside.py`)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinchpoint.capture import inject
from pinchpoint.capture.attached import DETACH_FILE, SAFE_WAIT_S
from pinchpoint.capture.launcher import PKG_PARENT, start_run_dir
from pinchpoint.capture.outside import alive, watch_outside
from pinchpoint.capture.sampler import DEFAULT_INTERVAL_S, spawn_sampler, stop_sampler
from pinchpoint.capture.stacks import DEFAULT_RATE_HZ, spawn_stack_sampler, stop_stack_sampler
from pinchpoint.capture.writer import write_json_atomic
from pinchpoint.errors import AttachError, InjectError

START_TIMEOUT_S = 15.0
"""How long the agent may take to start: the interpreter runs it the next time its main thread runs
Python code (a program blocked in one C call for longer gets nothing attached)."""
DEADLINE_SLACK_S = 60.0
"""The agent detaches by itself this long after the attach should have ended (the attacher died)."""
POLL_S = 0.1


@dataclass(frozen=True, slots=True)
class AttachResult:
    ended: str
    """"detached" (the program runs on), "exited" (it ended during the attach), "interrupted" (Ctrl-C)."""
    detached: dict[str, Any] | None
    """The agent's detached-PID.json: what it restored, what it left inert; None if it never answered."""
    outside: str | None = None
    """Why the process was watched from outside only (no agent in it), None when the agent ran."""


def attach(
    pid: int,
    run_dir: Path,
    *,
    duration_s: float,
    opwindow: str | None = None,
    trials: bool = True,
    stacks: bool = False,
    outside: bool = False,
    progress: Callable[[str], None] | None = None,
) -> AttachResult:
    """Attach to `pid` for `duration_s`, writing `run_dir`. When the agent cannot be put in but the
    process can be read (InjectError), or `outside`, it is watched from outside instead (py-spy and
    /proc: `capture/outside.py`). AttachError when neither can be done."""
    say = progress or (lambda line: None)
    target = inject.python_target(pid)
    meta = start_run_dir(run_dir, _cmdline(pid), "attach", _cwd(pid))
    meta["child_pid"] = pid
    record: dict[str, Any] = {"pid": pid, "duration_s": duration_s, "ended": None, "detached": None}
    meta["attach"] = record
    write_json_atomic(run_dir / "meta.json", meta)
    sampler = spawn_sampler(run_dir, pid, DEFAULT_INTERVAL_S)
    reason = "asked for with --outside" if outside else None
    try:
        if reason is None:
            try:
                ended, detached = _inside(target, run_dir, duration_s, opwindow, trials, stacks, say)
            except InjectError as exc:
                reason = str(exc)
        if reason is not None:
            say(f"{reason}; watching process {pid} from outside for {duration_s:g} s (Python stacks, /proc)")
            ended, record["outside"] = watch_outside(pid, run_dir, duration_s, reason)
            detached = None
    finally:
        stop_sampler(sampler)
    record.update(ended=ended, detached=detached)
    meta.update(ended_at=_now_iso())
    write_json_atomic(run_dir / "meta.json", meta)
    return AttachResult(ended=ended, detached=detached, outside=reason)


def _inside(
    target: inject.Target,
    run_dir: Path,
    duration_s: float,
    opwindow: str | None,
    trials: bool,
    stacks: bool,
    say: Callable[[str], None],
) -> tuple[str, dict[str, Any] | None]:
    """The agent put in, run for `duration_s` and detached: (how it ended, its detached record)."""
    pid = target.pid
    bootstrap = run_dir / "attach.py"
    deadline = time.time() + START_TIMEOUT_S + duration_s + DEADLINE_SLACK_S
    bootstrap.write_text(inject.bootstrap_source(PKG_PARENT, run_dir.resolve(), deadline, opwindow, trials))
    ended, detached, started = "detached", None, False
    stack_sampler = None
    try:
        inject.inject(target, bootstrap)
        _wait_started(pid, run_dir)
        started = True
        stack_sampler = spawn_stack_sampler(run_dir, pid, DEFAULT_RATE_HZ) if stacks else None
        say(f"attached to process {pid} ({target.comm}) for {duration_s:g} s")
        ended = _wait(pid, duration_s)
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        (run_dir / DETACH_FILE).touch()  # (also tells an agent that starts late not to)
        if started and ended != "exited":
            detached = _wait_detached(pid, run_dir)
        stop_stack_sampler(stack_sampler, program_ended=not alive(pid))
    return ended, detached


def _wait_started(pid: int, run_dir: Path) -> None:
    """Until the agent wrote its process file; AttachError if it failed or did not run in time."""
    limit = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < limit:
        if any(run_dir.glob(f"ranks/*/process-{pid}.json")):
            return
        error = run_dir / f"attach-error-{pid}.txt"
        if error.is_file():
            lines = [ln for ln in error.read_text(errors="replace").splitlines() if ln.strip()]
            raise AttachError(
                f"the agent did not start in process {pid}: {lines[-1] if lines else 'no reason'}"
            )
        if not alive(pid):
            raise AttachError(f"process {pid} exited before the agent started")
        time.sleep(POLL_S)
    raise InjectError(
        f"process {pid} ran no Python code for {START_TIMEOUT_S:.0f} s after the injection (blocked in one "
        "long C call?): the agent was not started"
    )


def _wait(pid: int, duration_s: float) -> str:
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        if not alive(pid):
            return "exited"
        time.sleep(POLL_S)
    return "detached"


def _wait_detached(pid: int, run_dir: Path) -> dict[str, Any] | None:
    import json

    limit = time.monotonic() + SAFE_WAIT_S + 5.0
    while time.monotonic() < limit and alive(pid):
        for path in run_dir.glob(f"ranks/*/detached-{pid}.json"):
            try:
                doc: dict[str, Any] = json.loads(path.read_text())
                return doc
            except (OSError, ValueError):
                pass
        time.sleep(POLL_S)
    return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return [f"pid {pid}"]
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or [f"pid {pid}"]


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _now_iso() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
