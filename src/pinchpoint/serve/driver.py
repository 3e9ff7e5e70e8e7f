"""`pinchpoint run --load URL`: the load sent from beside the program, then the program stopped.

A thread in the launcher waits until the server's port accepts a connection (or the program ends, or
`start_timeout_s` passes), sends the open-loop load (`serve/load.py`), writes one line per request to
`requests.jsonl` in the run directory (`run` adds `load.json`, the summary), and then stops the server as Ctrl-C would: SIGINT,
then SIGTERM after `GRACE_S`, then SIGKILL — a server pinchpoint started is never left running. Its
requests run in pinchpoint's own process: the sampler counts their CPU as pinchpoint's, not as another
program's (`SystemSample.tool_user_s`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pinchpoint.ingest.served import REQUESTS_FILE
from pinchpoint.serve.load import Plan, Target, run_load
from pinchpoint.trace.serving import Request

POLL_S = 0.05
SERVER_STOPPED = frozenset({0, 128 + 2, 128 + 15})
"""A server stopped after its load, by SIGINT (as Ctrl-C) or SIGTERM, exits 0 or by the signal."""
GRACE_S = 10.0
"""After SIGINT, the server's time to shut down before SIGTERM (and as long again before SIGKILL)."""


@dataclass(slots=True, kw_only=True)
class LoadDriver:
    url: str
    where: Target
    plan: Plan
    run_dir: Path
    start_timeout_s: float
    """How long the server may take to answer on its port (imports, model build) before it is stopped."""
    stopped: bool = False
    """pinchpoint ended the program (after its load), rather than the program ending by itself."""
    error: str | None = None
    """Why no load was sent (the port never answered, the program ended first)."""
    requests: list[Request] = field(default_factory=list)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def fresh(self, run_dir: Path) -> LoadDriver:
        """The same load, unsent, for another run (`try --load` runs each side under it)."""
        return LoadDriver(
            url=self.url,
            where=self.where,
            plan=self.plan,
            run_dir=run_dir,
            start_timeout_s=self.start_timeout_s,
        )

    def exit_code(self, program: int) -> int:
        """The run's exit code given the program's: 0 where pinchpoint stopped it after its load and it
        ended as asked; at least 1 where no load was sent; else the program's own."""
        if self.error is not None:
            return program or 1
        return 0 if self.stopped and program in SERVER_STOPPED else program

    def start(self, proc: subprocess.Popen[bytes], own_group: bool) -> None:
        """Runs the load beside `proc` on a daemon thread; returns at once."""
        self._thread = threading.Thread(
            target=self._run, args=(proc, own_group), name="pinchpoint-load", daemon=True
        )
        self._thread.start()

    def join(self, timeout_s: float = GRACE_S) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self, proc: subprocess.Popen[bytes], own_group: bool) -> None:
        if not self._wait_for_port(proc):
            if proc.poll() is None:  # it never answered: stopped all the same, bounded
                self._stop(proc, own_group)
            self._write(None)
            return
        try:
            requests = run_load(self.where, self.plan, stop=lambda: proc.poll() is not None)
        except Exception as exc:  # the load's own failure must not leave the server running
            self.error = f"the load failed: {exc}"
            requests = None
        self._write(requests)
        if proc.poll() is None:
            self._stop(proc, own_group)

    def _wait_for_port(self, proc: subprocess.Popen[bytes]) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.error = f"the program ended (exit code {proc.returncode}) before {self.url} answered"
                return False
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.where.host, self.where.port), 1.0),
            ):
                return True
            time.sleep(POLL_S)
        self.error = (
            f"nothing answered on {self.where.host}:{self.where.port} within {self.start_timeout_s:g} s"
        )
        return False

    def _stop(self, proc: subprocess.Popen[bytes], own_group: bool) -> None:
        """SIGINT (as Ctrl-C), then SIGTERM, then SIGKILL, each after `GRACE_S` without an exit."""
        self.stopped = True
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(OSError):
                if own_group:
                    os.killpg(proc.pid, sig)
                else:
                    proc.send_signal(sig)
            try:
                proc.wait(GRACE_S)
                return
            except subprocess.TimeoutExpired:
                continue

    def _write(self, requests: list[Request] | None) -> None:
        """requests.jsonl now (the report reads it); load.json, the summary, is the caller's (`run`)."""
        self.requests = requests or []
        if requests is not None:
            lines = "".join(json.dumps(dataclasses.asdict(r), separators=(",", ":")) + "\n" for r in requests)
            (self.run_dir / REQUESTS_FILE).write_text(lines)
