"""What each process's agent records, by its role (`Agent.role`; the hooks read it on every call). Of
these, process-{pid}.json records main, worker and launcher (`trace.run.Role`); the rest are states."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    MAIN = "main"
    """Runs the steps and records them."""
    WORKER = "worker"
    """A forked DataLoader worker: records its fetches."""
    PROBE = "probe"
    """The loader probe's forked worker: records nothing."""
    LAUNCHER = "launcher"
    """Starts the ranks (`torch.multiprocessing.spawn`) and runs no steps."""
    DETACHED = "detached"
    """`pinchpoint attach` is over: the hooks stay installed, inert."""
    OFF = "off"
    """A `pinchpoint.profile()` block is over: likewise."""


QUIET = frozenset({Role.DETACHED, Role.OFF})
"""Roles that record nothing, and whose forked children stay quiet too (a DataLoader worker forked after
a `profile()` block wrote its fetches into that block's closed run directory)."""
