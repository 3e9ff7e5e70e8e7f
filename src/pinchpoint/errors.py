"""pinchpoint's exceptions: one root, each with the exit code the command line maps it to.

Messages say what happened, the offending value, and what to do next, in one line.
"""

from __future__ import annotations


class PinchpointError(Exception):
    exit_code = 2


class UsageError(PinchpointError):
    """The command line asked for something impossible (missing script, existing output dir)."""

    exit_code = 2


class RunDirError(PinchpointError):
    """A run directory is missing, unreadable, or holds nothing to analyse."""

    exit_code = 3


class TraceError(PinchpointError):
    """A trace file cannot be read."""

    exit_code = 3


class AttachError(PinchpointError):
    """`pinchpoint attach` cannot join the process (none, not Python, not ours to trace, no debugger)."""

    exit_code = 4


class InjectError(AttachError):
    """The agent cannot be put into a process that may still be watched from outside (no gdb, gdb
    failed, the interpreter never ran the agent): `pinchpoint attach` falls back to py-spy and /proc."""
