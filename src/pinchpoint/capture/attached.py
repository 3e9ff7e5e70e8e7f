"""The agent inside a process that `pinchpoint attach` joined while it ran (`capture/inject.py` put it there).

It runs the hooks `pinchpoint run` installs at start-up, for a while, then detaches: every patched
attribute and registered hook is put back (`capture/patches.py`), the op window and any trial end, and
what was recorded stays in the run directory. It detaches when the attacher asks (a `detach` file in
the run directory), or by itself at its deadline if the attacher is gone.

Detaching removes the optimizer's global hooks, which torch iterates inside `Optimizer.step`: that is
safe only on the training thread outside a step's optimizer, so the agent detaches at the next
DataLoader fetch or top-level module call. A loop that makes neither within `SAFE_WAIT_S` is detached
from the watchdog thread, leaving those two hooks registered and inert.

What stays after a detach: pinchpoint's modules in `sys.modules` (none of their code runs again), the
torch modules the op window imported (its dispatch mode no longer imports `torch._dynamo`), and a
`_pinchpoint_seen` flag on each DataLoader iterator the agent saw.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from pinchpoint.capture.roles import Role
from pinchpoint.capture.writer import write_json_atomic

START_TIMEOUT_S = 15.0
"""How long the agent may take to start: the interpreter runs it the next time its main thread runs
Python code (a program blocked in one C call for longer gets nothing attached)."""
DEADLINE_SLACK_S = 60.0
"""The agent detaches by itself this long after the attach should have ended (the attacher died)."""

DETACH_FILE = "detach"
BOOTSTRAP_FILE = "attach.py"
"""The source the attacher writes and gdb has the program run (its time: when the attach began)."""
"""The attacher's request, in the run directory."""
POLL_S = 0.2
SAFE_WAIT_S = 5.0
"""How long the watchdog waits for the training thread to detach at a safe point."""

_LOCK = threading.Lock()


_ADDED_PATH: list[str] = []
"""The entry the bootstrap added to sys.path for pinchpoint's package: removed again on detach."""


def start(
    run_dir: str, deadline_wall_s: float, opwindow: str | None, trials: bool, added: str | None
) -> None:
    """Called once in the target's main thread (a pending call); never raises into the program.
    `added`: the sys.path entry the bootstrap added, removed when the agent fails to start or detaches."""
    root = Path(run_dir)
    try:
        _start(root, deadline_wall_s, opwindow, trials)
        if added is not None:
            _ADDED_PATH.append(added)
    except Exception:
        if added is not None:
            _forget_path(added)
        with contextlib.suppress(OSError):
            (root / f"attach-error-{os.getpid()}.txt").write_text(traceback.format_exc())


def _forget_path(path: str) -> None:
    with contextlib.suppress(ValueError):
        sys.path.remove(path)


def _start(root: Path, deadline_wall_s: float, opwindow: str | None, trials: bool) -> None:
    from pinchpoint.capture import agent as agent_mod

    if (root / DETACH_FILE).exists() or time.time() > deadline_wall_s:
        raise RuntimeError("the attacher gave up before this process ran the agent")
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "nn"):
        raise RuntimeError("torch is not imported in this process: nothing to hook")
    if agent_mod.AGENT is not None:
        raise RuntimeError("this process already runs a pinchpoint agent")
    if not trials:
        from pinchpoint.capture.trials import TRIALS_ENV

        os.environ[TRIALS_ENV] = "off"
    agent = agent_mod.start(root, window=opwindow or None)
    agent.attached = True
    agent.trials.deadline_wall_s = _detach_expected(root, deadline_wall_s)  # trials leave room for steps
    threading.Thread(
        target=_watch, args=(agent, root, deadline_wall_s), daemon=True, name="pinchpoint"
    ).start()


def _detach_expected(root: Path, deadline_wall_s: float) -> float:
    """When the attacher will detach: now (the agent has just started, and the attacher waits for that)
    plus the attach's duration. `deadline_wall_s` is the agent's own last resort, the duration plus
    `START_TIMEOUT_S` and `DEADLINE_SLACK_S` after the attacher wrote the bootstrap: read as the
    detach, it let every trial start (a 10 s attach ran all three back to back, 7 ordinary steps of 43)."""
    try:
        written = (root / BOOTSTRAP_FILE).stat().st_mtime
    except OSError:
        return deadline_wall_s - DEADLINE_SLACK_S
    return time.time() + max(0.0, deadline_wall_s - DEADLINE_SLACK_S - START_TIMEOUT_S - written)


def _watch(agent: Any, root: Path, deadline_wall_s: float) -> None:
    while not (root / DETACH_FILE).exists() and time.time() < deadline_wall_s:
        time.sleep(POLL_S)
        if agent.role is Role.DETACHED:
            return
    agent.detach_at_safe_point = detach_here
    waited = time.monotonic() + SAFE_WAIT_S
    while agent.role is not Role.DETACHED and time.monotonic() < waited:
        time.sleep(POLL_S / 4)
    detach(agent, safe=False)


def detach_here(agent: Any) -> bool:
    """The attacher is done: detach now if this is the training thread outside an optimizer step."""
    if agent.shape.in_optimizer or agent.role is not Role.MAIN or threading.get_ident() != agent.tid:
        return False
    detach(agent, safe=True)
    return True


def detach(agent: Any, *, safe: bool) -> None:
    """Put torch back and close the agent's files; `safe`: on the training thread, outside a step's
    optimizer (the optimizer hooks can go too). Idempotent."""
    from pinchpoint.capture import agent as agent_mod
    from pinchpoint.capture.patches import PATCHES

    with _LOCK:
        if agent.role is Role.DETACHED:
            return
        role = agent.role
        agent.close(keep_partial=False)  # the op window and trials end; files flushed
        agent.role = Role.DETACHED
        patched = len(PATCHES)
        failed = PATCHES.undo(handles=safe)
        atexit.unregister(agent.close)
        agent_mod.AGENT = None
        while _ADDED_PATH:
            _forget_path(_ADDED_PATH.pop())
        write_json_atomic(
            agent.rank_dir / f"detached-{os.getpid()}.json",
            {
                "pid": os.getpid(),
                "role": role,
                "t_ns": time.monotonic_ns(),
                "patches": patched,
                "not_restored": failed,
                "inert_hooks": [] if safe else ["optimizer step pre-hook", "optimizer step post-hook"],
                "steps": agent.step.index,
            },
        )
