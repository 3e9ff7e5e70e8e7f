"""pinchpoint's steps and phases as native-profiler ranges: NVTX (Nsight Systems) or ITT (VTune).

With `pinchpoint run --annotate nvtx|itt` the training thread pushes a range for each step
("pinchpoint/step 12") and, nested in it, one for each phase as it happens ("pinchpoint/forward",
"pinchpoint/data_wait", ...), through torch's own bindings (`torch.cuda.nvtx`, `torch.profiler.itt`),
so a timeline recorded by those tools shows where pinchpoint's steps and phases lie. Ranges are
pushed and popped in real time, so only phases whose start is known as they begin are annotated
(the `comm` time that DDP's reducer leaves inside backward is found only afterwards: it shows as
part of `backward`). Off by default: it costs a call into the tool's library per phase.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import agent_log

ANNOTATE_ENV = "PINCHPOINT_ANNOTATE"
KINDS = ("nvtx", "itt")
PREFIX = "pinchpoint/"


class Annotator:
    """Ranges on one thread: an outer one per step (opened lazily by its first phase), phases inside."""

    def __init__(self, push: Callable[[str], Any], pop: Callable[[], Any]) -> None:
        self._push, self._pop = push, pop
        self.depth = 0
        """Phase ranges open (nested in the step's)."""
        self.step_open = False

    def begin(self, phase: str, step_index: int) -> None:
        if not self.step_open:
            self._push(f"{PREFIX}step {step_index}")
            self.step_open = True
        self._push(PREFIX + phase)
        self.depth += 1

    def end(self) -> None:
        if self.depth > 0:
            self.depth -= 1
            self._pop()

    def end_step(self) -> None:
        """Close whatever is open: a phase left open by an exception, then the step."""
        while self.depth > 0:
            self.end()
        if self.step_open:
            self.step_open = False
            self._pop()


def make_annotator(kind: str, torch: Any) -> Annotator:
    """An annotator for `kind`; raises RuntimeError (one line) when this torch cannot emit it."""
    if kind == "itt":
        itt = torch.profiler.itt
        if not itt.is_available():
            raise RuntimeError("this torch build has no ITT support")
        return Annotator(itt.range_push, itt.range_pop)
    if kind == "nvtx":
        nvtx = torch.cuda.nvtx
        try:
            nvtx.range_push(f"{PREFIX}probe")
            nvtx.range_pop()
        except Exception as exc:  # a CPU build: "NVTX functions not installed"
            raise RuntimeError(f"NVTX is not available in this torch build ({exc})") from None
        return Annotator(nvtx.range_push, nvtx.range_pop)
    raise RuntimeError(f"unknown annotation kind {kind!r} (choose from {', '.join(KINDS)})")


def annotator_from_environment(run_dir: Path, torch: Any) -> Annotator | None:
    """The annotator `--annotate` asked for ($PINCHPOINT_ANNOTATE), or None; one that cannot start says
    why (agent.log and stderr) and the run goes on without it."""
    kind = os.environ.get(ANNOTATE_ENV)
    if not kind:
        return None
    try:
        return make_annotator(kind, torch)
    except Exception as exc:
        message = f"--annotate {kind}: {exc}; running without annotations"
        agent_log(run_dir, message)
        with contextlib.suppress(OSError):
            sys.stderr.write(f"pinchpoint: {message}\n")
        return None
