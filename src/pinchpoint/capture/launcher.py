"""Runs an unmodified program under capture: run directory, bootstrap, sampler, exit status.

The program inherits stdin, stdout and stderr and its exit code is passed through. Ctrl-C reaches
the program as usual (it shares the terminal's process group); the launcher waits it out, so the run
directory is finished however the program ends: normally, by exception, by signal or by OOM kill.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pinchpoint._version import __version__
from pinchpoint.capture import environment
from pinchpoint.capture import native as native_sampling
from pinchpoint.capture.annotate import ANNOTATE_ENV
from pinchpoint.capture.envnames import OPWINDOW_ENV, RECORDER_ENV, RUN_DIR_ENV
from pinchpoint.capture.sampler import DEFAULT_INTERVAL_S, spawn_sampler, stop_sampler
from pinchpoint.capture.stacks import (
    DEFAULT_RATE_HZ,
    NATIVE_RATE_HZ,
    STACKS_ENV,
    spawn_stack_sampler,
    stop_stack_sampler,
)
from pinchpoint.capture.writer import write_json_atomic

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"
PKG_PARENT = Path(__file__).resolve().parents[2]
"""The directory holding the pinchpoint package (src/ of a checkout, or site-packages)."""
SCHEMA = "pinchpoint.run/1"


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchResult:
    exit_code: int
    signal: str | None
    started: bool
    """False when the command could not be started at all (not found, not executable)."""
    error: str | None = None


def _wait(proc: subprocess.Popen[bytes], own_group: bool, meanwhile: Callable[[], None] | None) -> int:
    """The program's exit code, signals passed on meanwhile. At a terminal, Ctrl-C reaches the child through
    the foreground process group and the launcher just keeps waiting. Elsewhere (a supervisor, `timeout`,
    a notebook's interrupt, CI) the child runs in a process group of its own, and a SIGINT sent to
    pinchpoint (its pid or its group) is passed on once; SIGTERM always is."""

    def forward(signum: int, frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    old_int = signal.signal(signal.SIGINT, forward if own_group else signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, forward)
    try:
        if meanwhile is not None:
            with contextlib.suppress(Exception):
                meanwhile()
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


PR_SET_PDEATHSIG = 1


def _end_with_us() -> Callable[[], None] | None:
    """What the child runs before the program: SIGTERM to it when pinchpoint's launcher dies (killed,
    even by SIGKILL), so a program pinchpoint started — a server under `--load` — is never left running.
    Looked up here, before the fork (the child only calls it); None where there is no prctl (not Linux)."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _terminal_foreground() -> bool:
    """pinchpoint is the foreground job of a terminal (Ctrl-C there reaches its whole process group)."""
    try:
        return os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _iso_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def start_run_dir(run_dir: Path, command: list[str], mode: str, cwd: Path | None = None) -> dict[str, Any]:
    """Create the run directory with meta.json and environment.json; return the meta dict."""
    run_dir.mkdir(parents=True, exist_ok=True)
    meta: dict[str, Any] = {
        "schema": SCHEMA,
        "pinchpoint_version": __version__,
        "command": command,
        "cwd": str(cwd) if cwd is not None else os.getcwd(),
        "started_at": _iso_now(),
        "clock": {"wall_time_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()},
        "ended_at": None,
        "exit_code": None,
        "signal": None,
        "world_size": _world_size(command),
        "launcher_pid": os.getpid(),
        "child_pid": None,
        "mode": mode,
    }
    write_json_atomic(run_dir / "meta.json", meta)
    write_json_atomic(run_dir / "environment.json", environment.collect_environment())
    return meta


def finish_run_dir(run_dir: Path, meta: dict[str, Any], exit_code: int, sig: str | None) -> None:
    meta.update(ended_at=_iso_now(), ended_ns=time.monotonic_ns(), exit_code=exit_code, signal=sig)
    write_json_atomic(run_dir / "meta.json", meta)


def _world_size(command: list[str]) -> int:
    """World size from torchrun's --nproc_per_node/--nproc-per-node (times --nnodes), else 1."""
    nproc, nnodes = 1, 1
    for i, arg in enumerate(command):
        for flag in ("--nproc_per_node", "--nproc-per-node", "--nnodes"):
            value = None
            if arg == flag and i + 1 < len(command):
                value = command[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            if value is not None and value.isdigit():
                if flag == "--nnodes":
                    nnodes = int(value)
                else:
                    nproc = int(value)
    return nproc * nnodes


def child_environment(
    run_dir: Path,
    opwindow: str | None,
    *,
    kineto: bool = False,
    stacks: bool = False,
    annotate: str | None = None,
) -> dict[str, str]:
    env = dict(os.environ)
    if annotate:
        env[ANNOTATE_ENV] = annotate
    if kineto:
        env[RECORDER_ENV] = "kineto"
    if stacks:
        env[STACKS_ENV] = "1"
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    env["PINCHPOINT_PKG_PARENT"] = str(PKG_PARENT)
    if opwindow is not None:
        env[OPWINDOW_ENV] = opwindow
    existing = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + existing if existing else "")
    return env


def launch(
    command: list[str],
    run_dir: Path,
    *,
    opwindow: str | None = None,
    sample_interval_s: float | None = None,
    kineto: bool = False,
    stacks: bool = False,
    stacks_rate_hz: int | None = None,
    annotate: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    mode: str = "run",
    cwd: Path | None = None,
    native: bool = False,
    output: Path | None = None,
    meanwhile: Callable[[], None] | None = None,
    alongside: Callable[[subprocess.Popen[bytes], bool], None] | None = None,
) -> LaunchResult:
    """Run `command` to completion under capture, writing `run_dir`. Never raises for the child's sake.

    `stacks`: sample Python stacks of the whole process tree with py-spy (`capture/stacks.py`).
    `cwd`: the program's working directory (`pinchpoint try`'s scratch copy), else ours.
    `native`: sample native stacks with perf (`capture/native.py`).
    `output`: the program's stdout and stderr go to this file (`run --live` shows its last lines).
    `meanwhile`: called once the program has started (`run` loads its report code then, not before).
    `alongside`: given the program's process (and whether it has a process group of its own) once its
    sampler runs; returns at once (`run --load` starts its load thread)."""
    meta = start_run_dir(run_dir, command, mode, cwd)
    env = child_environment(run_dir, opwindow, kineto=kineto, stacks=stacks, annotate=annotate)
    env.update(extra_env or {})  # `pinchpoint try`: the fix's environment and the agent's step budget
    if cwd is not None:
        env["PWD"] = str(cwd)
    if native:
        env.update({k: v for k, v in native_sampling.JIT_PROFILE_ENV.items() if k not in env})
    sink = open(output, "ab") if output is not None else None  # noqa: SIM115 (closed after the program)
    own_group = not _terminal_foreground()
    try:
        proc = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=sink,
            stderr=sink,
            process_group=0 if own_group else None,
            preexec_fn=_end_with_us(),
        )
    except OSError as exc:
        if sink is not None:
            sink.close()
        finish_run_dir(run_dir, meta, 127, None)
        return LaunchResult(exit_code=127, signal=None, started=False, error=f"{exc.strerror}: {command[0]}")
    meta["child_pid"] = proc.pid
    write_json_atomic(run_dir / "meta.json", meta)
    sampler = spawn_sampler(run_dir, proc.pid, sample_interval_s or DEFAULT_INTERVAL_S)
    rate = stacks_rate_hz or (NATIVE_RATE_HZ if native else DEFAULT_RATE_HZ)
    stack_sampler = spawn_stack_sampler(run_dir, proc.pid, rate, native=native) if stacks else None
    native_sampler = native_sampling.spawn_native_sampler(run_dir, proc.pid) if native else None
    if alongside is not None:
        alongside(proc, own_group)
    try:
        rc = _wait(proc, own_group, meanwhile)
    finally:
        stop_sampler(sampler)
        stop_stack_sampler(stack_sampler)
        native_sampling.stop_native_sampler(native_sampler, run_dir)
        if sink is not None:
            sink.close()
    sig_name = None
    if rc < 0:
        sig_name = signal.Signals(-rc).name
        rc = 128 - rc
    finish_run_dir(run_dir, meta, rc, sig_name)
    return LaunchResult(exit_code=rc, signal=sig_name, started=True)
