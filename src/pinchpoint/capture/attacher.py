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
from pinchpoint.capture.attached import (
    BOOTSTRAP_FILE,
    DEADLINE_SLACK_S,
    DETACH_FILE,
    SAFE_WAIT_S,
    START_TIMEOUT_S,
)
from pinchpoint.capture.launcher import PKG_PARENT, start_run_dir
from pinchpoint.capture.outside import alive, environ, watch_outside
from pinchpoint.capture.sampler import DEFAULT_INTERVAL_S, spawn_sampler, stop_sampler
from pinchpoint.capture.stacks import DEFAULT_RATE_HZ, spawn_stack_sampler, stop_stack_sampler
from pinchpoint.capture.writer import write_json_atomic
from pinchpoint.errors import AttachError, InjectError

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
    """Attach to `pid` for `duration_s`, writing `run_dir`: a training process, or a torchrun launcher,
    whose local ranks are then each attached (`job_ranks`). When the agent cannot be put in but the
    process can be read (InjectError), or `outside`, it is watched from outside instead (py-spy and
    /proc: `capture/outside.py`; rank 0 of a job). AttachError when neither can be done."""
    say = progress or (lambda line: None)
    ranks = job_ranks(pid)
    targets = [inject.python_target(p) for _, p in ranks] if ranks else [inject.python_target(pid)]
    meta = start_run_dir(run_dir, _cmdline(pid), "attach", _cwd(pid))
    meta["child_pid"] = pid
    record: dict[str, Any] = {"pid": pid, "duration_s": duration_s, "ended": None, "detached": None}
    if ranks:
        record["ranks"] = [{"rank": r, "pid": p} for r, p in ranks]
        meta["world_size"] = len(ranks)
        say(f"process {pid} is a torchrun launcher: attaching to its {len(ranks)} local rank(s)")
    meta["attach"] = record
    write_json_atomic(run_dir / "meta.json", meta)
    sampler = spawn_sampler(run_dir, pid, DEFAULT_INTERVAL_S)
    reason = "asked for with --outside" if outside else None
    try:
        if reason is None:
            try:
                ended, detached = _inside(targets, run_dir, duration_s, opwindow, trials, stacks, say)
            except InjectError as exc:
                reason = str(exc)
        if reason is not None:
            watched = targets[0].pid
            say(
                f"{reason}; watching process {watched} from outside for {duration_s:g} s (Python stacks, /proc)"
            )
            record["pid"] = watched
            ended, record["outside"] = watch_outside(watched, run_dir, duration_s, reason)
            detached = None
    finally:
        stop_sampler(sampler)
    record.update(ended=ended, detached=detached)
    meta.update(ended_at=_now_iso())
    write_json_atomic(run_dir / "meta.json", meta)
    return AttachResult(ended=ended, detached=detached, outside=reason)


def _inside(
    targets: list[inject.Target],
    run_dir: Path,
    duration_s: float,
    opwindow: str | None,
    trials: bool,
    stacks: bool,
    say: Callable[[str], None],
) -> tuple[str, dict[str, Any] | None]:
    """The agent put in each target, run for `duration_s` and detached: (how it ended, what the agents
    restored, summed over the targets; None unless every agent confirmed its detach)."""
    pids = [t.pid for t in targets]
    bootstrap = run_dir / BOOTSTRAP_FILE
    deadline = time.time() + START_TIMEOUT_S + duration_s + DEADLINE_SLACK_S
    bootstrap.write_text(inject.bootstrap_source(PKG_PARENT, run_dir.resolve(), deadline, opwindow, trials))
    ended, started = "detached", False
    records: list[dict[str, Any] | None] = []
    stack_sampler = None
    try:
        for target in targets:
            inject.inject(target, bootstrap)
        for pid in pids:
            _wait_started(pid, run_dir)
        started = True
        stack_sampler = spawn_stack_sampler(run_dir, pids[0], DEFAULT_RATE_HZ) if stacks else None
        names = ", ".join(f"{t.pid} ({t.comm})" for t in targets)
        say(f"attached to process{'es' if len(targets) > 1 else ''} {names} for {duration_s:g} s")
        ended = _wait(pids, duration_s)
    except KeyboardInterrupt:
        ended = "interrupted"
    finally:
        (run_dir / DETACH_FILE).touch()  # (also tells an agent that starts late not to)
        if started and ended != "exited":
            records = [_wait_detached(pid, run_dir) for pid in pids]
        stop_stack_sampler(stack_sampler, program_ended=not alive(pids[0]))
    return ended, _combined(records) if records and all(r is not None for r in records) else None


def _combined(records: list[dict[str, Any] | None]) -> dict[str, Any]:
    docs = [r for r in records if r is not None]
    if len(docs) == 1:
        return docs[0]
    return {
        "pids": [d.get("pid") for d in docs],
        "patches": sum(int(d.get("patches") or 0) for d in docs),
        "not_restored": [x for d in docs for x in d.get("not_restored") or []],
        "inert_hooks": [x for d in docs for x in d.get("inert_hooks") or []],
        "steps": sum(int(d.get("steps") or 0) for d in docs),
    }


LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def job_ranks(pid: int) -> list[tuple[int, int]]:
    """(rank, pid) of each local rank a torchrun launcher `pid` started (its children with $RANK),
    by rank; [] when `pid` is not a launcher."""
    if not any(word.endswith(LAUNCHERS) for word in _cmdline(pid)[:3]):
        return []
    ranks: list[tuple[int, int]] = []
    for child in _children(pid):
        env = environ(child)
        rank = env.get("RANK", "")
        if rank.isdigit() and "LOCAL_RANK" in env:
            ranks.append((int(rank), child))
    return sorted(ranks)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == str(pid):
                out.append(int(entry))
    return out


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


def _wait(pids: list[int], duration_s: float) -> str:
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        if not all(alive(pid) for pid in pids):
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
