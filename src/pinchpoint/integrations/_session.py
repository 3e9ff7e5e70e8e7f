"""What both callbacks share: join `pinchpoint run`'s agent, or profile the training themselves."""

from __future__ import annotations

import contextlib
from typing import Any

from pinchpoint.capture import agent as agent_mod
from pinchpoint.capture.loop_shapes import LoopMode
from pinchpoint.capture.roles import Role


class Session:
    def __init__(self, **profile_options: Any) -> None:
        self.options = profile_options
        self.profile: Any = None
        self.agent: agent_mod.Agent | None = None

    def begin(self, found: dict[str, Any] | None) -> None:
        """Training starts: find (or start) the agent and record the framework and its settings."""
        agent = agent_mod.current()
        if agent is None:
            import pinchpoint

            self.profile = pinchpoint.profile(**self.options)
            self.profile.__enter__()
            agent = agent_mod.current()
        self.agent = agent
        if agent is None:
            return
        agent.shape.mode, agent.shape.explicit_kind = (
            LoopMode.EXPLICIT,
            "train",
        )  # the callback ends the steps now
        if found is not None:
            agent.framework = found | {"via": "callback"}
            with contextlib.suppress(Exception):
                agent.write_process_info()

    def step(self, kind: str) -> None:
        if self.agent is not None and self.agent.role is Role.MAIN:
            self.agent.explicit_step(kind)

    def end(self) -> None:
        """Training ended: a callback that started its own profile finishes it (report printed)."""
        profile, self.profile = self.profile, None
        if profile is not None:
            profile.__exit__(None, None, None)
