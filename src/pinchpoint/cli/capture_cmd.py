"""pinchpoint capture RUN_DIR|PID [--steps 3]: ask a running pinchpoint agent for an op window now
(`capture/on_demand.py`), so a slowdown late in a long run is diagnosed from its own ops; with
`--stacks S`, its Python stacks are sampled for S seconds too."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from pinchpoint.errors import AttachError, UsageError
from pinchpoint.ingest.fields import as_dict, load_json

DEFAULT_STEPS = 3
ANSWER_WAIT_S = 120.0
"""The agents look at the request at a step's end, at most once a second: a run with 100 s steps
answers within 100 s."""
POLL_S = 0.2


class CaptureCommand:
    NAME = "capture"
    HELP = "open an op window now in a run that is going on (pinchpoint run), for a late slowdown"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("target", help="the run directory of a run going on, or its program's pid")
        parser.add_argument(
            "--steps", type=int, default=DEFAULT_STEPS, help=f"steps to record (default {DEFAULT_STEPS})"
        )
        parser.add_argument(
            "--stacks", type=float, default=0.0, metavar="S", help="also sample Python stacks for S seconds"
        )
        parser.add_argument(
            "--wait", type=float, default=ANSWER_WAIT_S, metavar="S", help="give up after S seconds"
        )

    def execute(self, args: argparse.Namespace) -> int:
        from pinchpoint.capture.on_demand import MAX_STEPS, REQUEST_FILE
        from pinchpoint.capture.writer import write_json_atomic

        if not 1 <= args.steps <= MAX_STEPS:
            raise UsageError(f"--steps must be 1 to {MAX_STEPS}, not {args.steps}")
        run_dir = _run_dir(args.target)
        meta = _meta(run_dir)
        if meta.get("ended_at"):
            raise AttachError(f"the run in {run_dir} has ended: nothing to capture")
        request = run_dir / REQUEST_FILE
        previous = _read(request).get("id")
        request_id = (previous if isinstance(previous, int) else 0) + 1
        write_json_atomic(request, {"id": request_id, "steps": args.steps, "t": time.time()})
        print(f"pinchpoint: asked {run_dir} for an op window over {args.steps} step(s)...", file=sys.stderr)
        if args.stacks > 0:
            _sample_stacks(run_dir, meta, args.stacks)
        deadline = time.monotonic() + args.wait
        answers = _wait_answers(run_dir, request_id, deadline)
        opened = {rank: a for rank, a in answers.items() if "start_step" in a}
        for rank, a in sorted(answers.items()):
            if "refused" in a:
                print(f"pinchpoint: rank {rank} refused: {a['refused']}", file=sys.stderr)
        if not opened:
            raise AttachError(
                f"no agent in {run_dir} opened a window within {args.wait:g} s (the run may be between "
                "steps, or its steps may be longer)"
            )
        done = _wait_done(run_dir, opened, deadline)
        for rank, a in sorted(opened.items()):
            span = f"steps {a['start_step']}-{a['start_step'] + a['steps'] - 1}"
            kept = f"; the earlier one kept as {a['kept']}" if a.get("kept") else ""
            state = "recorded" if rank in done else "opened (not closed yet)"
            print(f"pinchpoint: rank {rank}: op window over {span} {state}{kept}", file=sys.stderr)
        print(f"pinchpoint: the report reads the latest window: pinchpoint report {run_dir}", file=sys.stderr)
        return 0 if len(done) == len(opened) else AttachError.exit_code


def _run_dir(target: str) -> Path:
    from pinchpoint.capture.envnames import RUN_DIR_ENV
    from pinchpoint.capture.outside import environ

    if target.isdigit():
        if not Path(f"/proc/{target}").is_dir():
            raise AttachError(f"no process {target}")
        if not os.access(f"/proc/{target}/environ", os.R_OK):
            raise AttachError(f"cannot read process {target}'s environment: permission denied")
        found = environ(int(target)).get(RUN_DIR_ENV)
        if found is None:
            raise AttachError(
                f"process {target} was not started by pinchpoint run: pass its run directory, or use "
                f"pinchpoint attach {target}"
            )
        return Path(found)
    path = Path(target)
    if not (path / "meta.json").is_file():
        raise UsageError(f"{target} is neither a pid nor a run directory (no meta.json)")
    return path


def _meta(run_dir: Path) -> dict[str, Any]:
    return _read(run_dir / "meta.json")


def _read(path: Path) -> dict[str, Any]:
    return as_dict(load_json(path, []))


def _answers(run_dir: Path, request_id: int) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for path in run_dir.glob(f"ranks/rank*/capture-{request_id}.json"):
        doc = _read(path)
        if doc:
            out[int(path.parent.name.removeprefix("rank"))] = doc | {"_path": path}
    return out


def _wait_answers(run_dir: Path, request_id: int, deadline: float) -> dict[int, dict[str, Any]]:
    """Every rank's answer, or those there are when the deadline passes or the run ends."""
    ranks = len(list(run_dir.glob("ranks/rank*")))
    while True:
        answers = _answers(run_dir, request_id)
        if len(answers) >= max(1, ranks) or time.monotonic() >= deadline or _meta(run_dir).get("ended_at"):
            return answers
        time.sleep(POLL_S)


def _wait_done(run_dir: Path, opened: dict[int, dict[str, Any]], deadline: float) -> set[int]:
    """The ranks whose window closed: a probes.json written after their answer."""
    done: set[int] = set()
    while True:
        for rank, a in opened.items():
            probes = a["_path"].parent / "probes.json"
            try:
                if probes.stat().st_mtime_ns >= a["_path"].stat().st_mtime_ns:
                    done.add(rank)
            except OSError:
                pass
        if len(done) == len(opened) or time.monotonic() >= deadline or _meta(run_dir).get("ended_at"):
            return done
        time.sleep(POLL_S)


def _sample_stacks(run_dir: Path, meta: dict[str, Any], seconds: float) -> None:
    """py-spy on the program for `seconds`, into the run directory's stacks files (unless the run
    samples them already)."""
    from pinchpoint.capture.stacks import DEFAULT_RATE_HZ, spawn_stack_sampler, stop_stack_sampler

    pid = meta.get("child_pid")
    if (run_dir / "stacks.json").exists() or not isinstance(pid, int):
        print("pinchpoint: stacks: the run samples them already (or its pid is unknown)", file=sys.stderr)
        return
    proc = spawn_stack_sampler(run_dir, pid, DEFAULT_RATE_HZ)
    time.sleep(seconds)
    stop_stack_sampler(proc, program_ended=False)
