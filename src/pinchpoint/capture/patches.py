"""Every attribute the agent replaces in torch, and every hook it registers, kept so they can be put back.

`pinchpoint run` never undoes them (the process ends with its agent); `pinchpoint attach` does when it
detaches, so the program runs on exactly as it did before (`capture/attached.py`)."""

from __future__ import annotations

import contextlib
from typing import Any

_MISSING = object()


class Patches:
    def __init__(self) -> None:
        self._set: list[tuple[Any, str, Any]] = []
        """(owner, name, what `owner` itself held before, or _MISSING when it inherited the name)."""
        self._handles: list[Any] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        """`setattr(owner, name, value)`, remembering what to restore."""
        own = vars(owner).get(name, _MISSING) if hasattr(owner, "__dict__") else getattr(owner, name)
        setattr(owner, name, value)
        self._set.append((owner, name, own))

    def handle(self, handle: Any) -> None:
        """A removable hook handle (`handle.remove()`)."""
        self._handles.append(handle)

    def __len__(self) -> int:
        return len(self._set) + len(self._handles)

    def undo(self, *, handles: bool = True) -> list[str]:
        """Put everything back, newest first; returns what could not be (`owner.name`). With
        `handles=False` the hook handles stay registered (their hooks must then pass through)."""
        failed: list[str] = []
        for owner, name, own in reversed(self._set):
            try:
                if own is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, own)
            except Exception:
                failed.append(f"{getattr(owner, '__name__', type(owner).__name__)}.{name}")
        self._set = []
        if handles:
            for h in reversed(self._handles):
                with contextlib.suppress(Exception):
                    h.remove()
            self._handles = []
        return failed


PATCHES = Patches()
"""This process's patches (one agent per process)."""
