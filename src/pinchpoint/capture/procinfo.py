"""One process's entry in a system sample's ``procs``: read from ``/proc`` (Linux) or through psutil.

Standard library and psutil only: the sampler process imports this at start-up (see :mod:`.sampler`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import psutil

from pinchpoint.capture import procfs

# Per-process failures that mean "skip this process for this sample", not "something is wrong".
PROC_ERRORS: tuple[type[BaseException], ...] = (
    psutil.NoSuchProcess,  # includes ZombieProcess
    psutil.AccessDenied,
    ProcessLookupError,
    FileNotFoundError,
    PermissionError,
)
_IO_ERRORS: tuple[type[BaseException], ...] = (*PROC_ERRORS, AttributeError, NotImplementedError, OSError)


class Known:
    """What the sampler remembers about one PID between samples."""

    __slots__ = ("cmdline0", "comm", "name", "pid", "ppid", "proc")

    def __init__(self, pid: int, ppid: int, proc: Any = None) -> None:
        self.pid = pid
        self.ppid = ppid
        self.proc = proc  # psutil.Process (psutil path only)
        self.comm: str | None = None  # the kernel's (truncated) name, to notice an exec
        self.name: str | None = None
        self.cmdline0: str | None = None


def procfs_record(k: Known, comm: str, st: list[bytes], status: bytes) -> dict[str, Any]:
    """The entry from the process's ``stat`` (``comm`` and ``st`` from :func:`procfs.parse_stat`) and
    ``status``, already read; reads ``cmdline`` (only when the name changed) and ``io`` itself."""
    pid = k.pid
    if comm != k.comm:
        # first sighting, or the process exec'd: refresh the (cached) argv[0]
        k.comm = comm
        try:
            k.cmdline0 = procfs.cmdline0(pid)
        except PROC_ERRORS:
            k.cmdline0 = None
        k.name = procfs.full_name(comm, k.cmdline0)
        if k.cmdline0 is None:
            k.cmdline0 = k.name
    read_bytes: int | None = None
    write_bytes: int | None = None
    try:
        io = procfs.read_proc(f"/proc/{pid}/io")
        read_bytes = procfs.field(io, b"read_bytes:")
        write_bytes = procfs.field(io, b"write_bytes:")
    except (OSError, ValueError):
        pass  # another user's process, or a kernel without task io accounting
    return {
        "pid": pid,
        "ppid": k.ppid,
        "name": k.name,
        "cmdline0": k.cmdline0,
        "user_s": int(st[11]) / procfs.CLK_TCK,
        "sys_s": int(st[12]) / procfs.CLK_TCK,
        "cuser_s": int(st[13]) / procfs.CLK_TCK,
        "rss_bytes": procfs.rss_bytes(status, st),
        "threads": int(st[17]),
        "ctx_vol": procfs.field(status, b"voluntary_ctxt_switches:"),
        "ctx_invol": procfs.field(status, b"nonvoluntary_ctxt_switches:"),
        "read_bytes": read_bytes,
        "write_bytes": write_bytes,
        "runq_s": procfs.tasks_run_delay_s(pid),
    }


def psutil_record(k: Known, on_root_exit: Callable[[], None] | None) -> dict[str, Any] | None:
    """The entry through psutil (``k.proc``); None without one. Raises :data:`PROC_ERRORS` when the
    process cannot be read (gone, access denied). ``on_root_exit`` (given for the root only) is called
    when the process is a zombie or dead."""
    p = k.proc
    if p is None:
        return None
    with p.oneshot():
        if on_root_exit is not None and p.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            on_root_exit()
        name = str(p.name())
        if name != k.comm:
            # first sighting, or the process exec'd: refresh the (cached) argv[0]
            k.comm = k.name = name
            try:
                argv: list[str] = p.cmdline()
                k.cmdline0 = argv[0] if argv else name
            except PROC_ERRORS:
                k.cmdline0 = name
        cpu = p.cpu_times()
        mem = p.memory_info()
        threads = int(p.num_threads())
        ctx = p.num_ctx_switches()
        read_bytes: int | None = None
        write_bytes: int | None = None
        try:
            io = p.io_counters()
            read_bytes = int(io.read_bytes)
            write_bytes = int(io.write_bytes)
        except _IO_ERRORS:
            pass  # no io counters here (permissions, macOS, kernel without task io accounting)
    return {
        "pid": k.pid,
        "ppid": k.ppid,
        "name": name,
        "cmdline0": k.cmdline0,
        "user_s": float(cpu.user),
        "sys_s": float(cpu.system),
        "cuser_s": float(getattr(cpu, "children_user", 0.0)),
        "rss_bytes": int(mem.rss),
        "threads": threads,
        "ctx_vol": int(ctx.voluntary),
        "ctx_invol": int(ctx.involuntary),
        "read_bytes": read_bytes,
        "write_bytes": write_bytes,
        "runq_s": procfs.tasks_run_delay_s(k.pid) if procfs.PROCFS else None,
    }


def tool_cpu(tree: set[int], use_procfs: bool) -> dict[str, float]:
    """pinchpoint's own CPU seconds outside the program's tree: this process (the sampler) and the one
    that started it (the launcher: `run --load` sends its requests from there), unless that is in the tree."""
    own = os.times()
    user, sys_ = own.user, own.system
    parent = os.getppid()
    if parent > 1 and parent not in tree:
        try:
            if use_procfs:
                _, st = procfs.parse_stat(procfs.read_proc(f"/proc/{parent}/stat"))
                user += int(st[11]) / procfs.CLK_TCK
                sys_ += int(st[12]) / procfs.CLK_TCK
            else:
                times = psutil.Process(parent).cpu_times()
                user, sys_ = user + times.user, sys_ + times.system
        except Exception:  # (best effort: the launcher gone, an unreadable stat; never the sample's failure)
            pass
    return {"user_s": round(user, 3), "sys_s": round(sys_, 3)}
