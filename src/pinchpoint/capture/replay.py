"""A call of the program's model kept during the run and replayed quietly at exit: the mechanism the batch
probe and the context probe share.

The kept call holds its module and arguments (the module until exit: a program's model is often a local of
a function that returned long before `atexit` runs) and the grad and inference modes it ran in. At exit
pinchpoint's own recording of module calls is turned off, the call is replayed in its modes by the probe's
`measure`, and what it measured is written to ranks/rankR/<FILE> with the process's pid and the replay's
`start_ns`/`end_ns` (the replay's time is pinchpoint's, not the program's). Nothing here raises: a model
that refuses a replayed call ends the measurement, and what was measured before stands.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pinchpoint.capture.writer import write_json_atomic


@dataclass(frozen=True)
class KeptCall:
    module: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    grad: bool
    inference: bool

    @classmethod
    def of(cls, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], torch: Any) -> KeptCall:
        """The call as it is being made, with the modes in force now."""
        grad = bool(torch.is_grad_enabled())
        return cls(module, args, dict(kwargs), grad, bool(torch.is_inference_mode_enabled()))

    def mode(self, torch: Any) -> Any:
        """The context manager that restores the call's modes."""
        return torch.inference_mode() if self.inference else torch.set_grad_enabled(self.grad)


class ExitReplay:
    """Keeps one call (`keep`) and replays it at exit; subclasses say what to measure and what to write."""

    FILE: ClassVar[str] = ""

    def __init__(self, rank_dir: Callable[[], Path], quiet: Callable[[bool], None]) -> None:
        self.rank_dir = rank_dir
        self.quiet = quiet
        """Turns pinchpoint's own recording of module calls off (True) and on while the probe calls."""
        self.kept: KeptCall | None = None

    def keep(self, call: KeptCall, torch: Any) -> None:
        self.kept = call
        atexit.register(self.run, torch)

    def measure(self, call: KeptCall, torch: Any, found: dict[str, Any]) -> None:
        """Replays `call` (its modes in force) and puts what it measured in `found` as it goes."""
        raise NotImplementedError

    def document(self, found: dict[str, Any]) -> dict[str, Any] | None:
        """The file's fields from what was measured, or None to write nothing."""
        return found or None

    def run(self, torch: Any) -> None:
        """The replay at exit; never raises."""
        if self.kept is None:
            return
        call = self.kept
        found: dict[str, Any] = {}
        start = time.monotonic_ns()
        self.quiet(True)
        try:
            with call.mode(torch):
                self.measure(call, torch, found)
        except Exception:  # (what was measured before stands)
            pass
        finally:
            self.quiet(False)
        doc = self.document(found)
        if doc:
            doc.update(pid=os.getpid(), start_ns=start, end_ns=time.monotonic_ns())
            with contextlib.suppress(OSError):
                write_json_atomic(self.rank_dir() / self.FILE, doc)
