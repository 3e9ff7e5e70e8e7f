"""The meta-path finder that attaches the agent once `torch` has been imported (`agent.start`)."""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import sys
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


class TorchImportHook(importlib.abc.MetaPathFinder):
    """Finds `torch` through the other finders and attaches the agent once its module has executed.

    It stays on `sys.meta_path` until then: `importlib.util.find_spec("torch")` (transformers' and
    accelerate's availability checks) asks the finders for a spec it never executes, and a hook that
    left after the first question would never see the real import."""

    def __init__(self, agent: AttachingAgent) -> None:
        self.agent = agent
        self.done = False

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" or self.done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        orig_exec = getattr(loader, "exec_module")  # noqa: B009
        hook = self

        def exec_module(module: ModuleType) -> None:
            hook.done = True
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(hook)
            orig_exec(module)
            try:
                hook.agent.attach(module)
            except Exception as exc:  # never break the user's program
                agent_log(hook.agent.run_dir, f"pinchpoint agent could not attach: {exc!r}")

        setattr(loader, "exec_module", exec_module)  # noqa: B010
        return spec
