"""Meta-path finders that act once a module has been imported: the agent attaches after `torch`
(`agent.start`), the graph watch wraps inductor's graphs after their module (`graph_watch.py`)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from pinchpoint.capture.writer import agent_log


class AttachingAgent(Protocol):
    """What the import hook needs from the agent (`agent.Agent`): where to log, and what to call once
    torch is imported."""

    @property
    def run_dir(self) -> Path: ...
    def attach(self, torch: Any) -> None: ...


class AfterImport(importlib.abc.MetaPathFinder):
    """Finds `fullname` through the other finders and calls `then(module)` once it has executed.

    It stays on `sys.meta_path` until then: `importlib.util.find_spec("torch")` (transformers' and
    accelerate's availability checks) asks the finders for a spec it never executes, and a hook that
    left after the first question would never see the real import."""

    def __init__(self, fullname: str, then: Callable[[ModuleType], None]) -> None:
        self.fullname = fullname
        self.then = then
        self.done = False

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname or self.done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        orig_exec = getattr(loader, "exec_module")  # noqa: B009
        hook = self

        def exec_module(module: ModuleType) -> None:
            hook.done = True
            hook.remove()
            orig_exec(module)
            hook.then(module)

        setattr(loader, "exec_module", exec_module)  # noqa: B010
        return spec

    def remove(self) -> None:
        """Off `sys.meta_path` (also the handle `capture/patches.py` undoes on detach)."""
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


def when_imported(fullname: str, then: Callable[[ModuleType], None], patches: Any) -> None:
    """`then(module)` now if `fullname` is imported, else once it is (a finder that `patches` takes
    off `sys.meta_path` on detach)."""
    module = sys.modules.get(fullname)
    if module is not None:
        then(module)
        return
    finder = AfterImport(fullname, then)
    sys.meta_path.insert(0, finder)
    patches.handle(finder)


class TorchImportHook(AfterImport):
    """Attaches the agent once `torch` has been imported."""

    def __init__(self, agent: AttachingAgent) -> None:
        super().__init__("torch", self._attach)
        self.agent = agent

    def _attach(self, module: ModuleType) -> None:
        try:
            self.agent.attach(module)
        except Exception as exc:  # never break the user's program
            agent_log(self.agent.run_dir, f"pinchpoint agent could not attach: {exc!r}")
