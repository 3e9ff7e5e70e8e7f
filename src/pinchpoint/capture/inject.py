"""Puts pinchpoint's agent into a running Python process, through gdb (`pinchpoint attach`).

gdb stops the process for a fraction of a second and, without loading any shared library's symbols
but libc's and libpython's, maps one page in it, writes a line of Python there and queues that line
as a pending call (`Py_AddPendingCall(PyRun_SimpleString, line)`). The interpreter runs pending calls
on its main thread between two bytecodes, holding the GIL, so the agent starts at a point where
Python code may run, never inside malloc or a half-done C call. That line reads the bootstrap file
(`bootstrap_source`) into its own namespace: nothing lands in the program's `__main__`.
The page (4 KiB) stays mapped after the agent detaches; nothing else of the injection remains.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pinchpoint.errors import AttachError, InjectError

GDB_TIMEOUT_S = 60.0
_RC = re.compile(r"pinchpoint-rc=(-?\d+)")


@dataclass(frozen=True, slots=True)
class Target:
    pid: int
    comm: str
    libpython: str | None
    """The shared libpython the interpreter runs from, or None for a python with libpython linked in."""


def python_target(pid: int) -> Target:
    """The process `pid`, checked to exist and to run a CPython interpreter; AttachError otherwise."""
    proc = Path(f"/proc/{pid}")
    try:
        comm = (proc / "comm").read_text().strip()
    except FileNotFoundError:
        raise AttachError(f"no process {pid}") from None
    except OSError as exc:
        raise AttachError(f"cannot read process {pid}: {exc.strerror}") from None
    try:
        maps = (proc / "maps").read_text()
        exe = os.readlink(proc / "exe")
    except PermissionError:
        raise AttachError(
            f"process {pid} ({comm}) is not ours to trace: run pinchpoint attach as its user or as root"
        ) from None
    except OSError as exc:
        raise AttachError(f"cannot read process {pid} ({comm}): {exc.strerror}") from None
    libs = re.findall(r"(/\S*libpython3\.\d+\S*\.so[.\d]*)\s*$", maps, re.M)
    if libs:
        return Target(pid, comm, libs[0])
    if re.fullmatch(r"python3?(\.\d+)?[a-z]*", Path(exe.removesuffix(" (deleted)")).name):
        return Target(pid, comm, None)
    raise AttachError(f"process {pid} ({comm}, {exe}) is not a Python process")


def bootstrap_source(pkg_parent: Path, run_dir: Path, deadline_wall_s: float, opwindow: str | None,
                     trials: bool) -> str:  # fmt: skip
    """What the target runs: pinchpoint's package on its path, then `capture.attached.start`."""
    path = str(pkg_parent)
    return (
        "import sys\n"
        f"added = {path!r} not in sys.path\n"
        f"if added:\n    sys.path.append({path!r})\n"
        "try:\n"
        "    from pinchpoint.capture import attached\n"
        f"    attached.start({str(run_dir)!r}, {deadline_wall_s!r}, {opwindow!r}, {trials!r},"
        f" {path!r} if added else None)\n"
        "except BaseException:\n"
        f"    if added and {path!r} in sys.path:\n        sys.path.remove({path!r})\n"
        "    raise\n"
    )


def inject(target: Target, bootstrap: Path) -> None:
    """Queue `exec` of the file `bootstrap` in `target`'s main thread; AttachError when gdb cannot."""
    gdb = shutil.which("gdb")
    if gdb is None:
        raise InjectError("gdb is not installed (apt install gdb): cannot put the agent into the process")
    line = f"exec(open({str(bootstrap)!r}).read(), {{'__name__': 'pinchpoint_attach'}})"
    with tempfile.TemporaryDirectory(prefix="pinchpoint-inject-") as tmp:
        code = Path(tmp) / "line.bin"
        code.write_bytes(line.encode() + b"\0")
        script = Path(tmp) / "inject.gdb"
        script.write_text(_gdb_script(target, code))
        try:
            res = subprocess.run(
                [gdb, "-nx", "-batch", "-p", str(target.pid), "-x", str(script)],
                capture_output=True, text=True, timeout=GDB_TIMEOUT_S, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise InjectError(
                f"gdb did not finish within {GDB_TIMEOUT_S:.0f} s on process {target.pid}"
            ) from None
    out = res.stdout + res.stderr
    found = _RC.search(out)
    if found is not None and found.group(1) == "0":
        return
    message = _gdb_failure(target, out)
    if "not ours to trace" in message or "exited while" in message:
        raise AttachError(message)  # nothing more can be read from outside either
    raise InjectError(message)


def _gdb_script(target: Target, code: Path) -> str:
    lines = [
        "set pagination off",
        "set confirm off",
        "set auto-solib-add off",
        "sharedlibrary libc\\.so",
    ]
    if target.libpython is not None:
        lines.append(f"sharedlibrary {re.escape(Path(target.libpython).name)}")
    lines += [
        "set $pp_buf = ((void*(*)(void*, unsigned long, int, int, int, long))mmap)(0, 4096, 3, 34, -1, 0)",
        f"restore {code} binary $pp_buf",
        "set $pp_rc = ((int(*)(void*, void*))Py_AddPendingCall)((void*)PyRun_SimpleString, $pp_buf)",
        'printf "pinchpoint-rc=%d\\n", $pp_rc',
        "detach",
        "quit",
    ]
    return "\n".join(lines) + "\n"


def _gdb_failure(target: Target, out: str) -> str:
    where = f"process {target.pid} ({target.comm})"
    if "Operation not permitted" in out:
        return (
            f"{where} is not ours to trace (ptrace refused): run pinchpoint attach as its user or as "
            "root, or allow ptrace (sysctl kernel.yama.ptrace_scope=0)"
        )
    if "No such process" in out or "process exited" in out.lower():
        return f"{where} exited while pinchpoint attached"
    if re.search(r'No symbol "(mmap|Py_AddPendingCall|PyRun_SimpleString)"', out):
        return f"{where}: gdb found no CPython entry points in it (a Python without exported symbols?)"
    found = _RC.search(out)
    if found is not None:
        return f"{where}: the interpreter refused the agent (Py_AddPendingCall returned {found.group(1)})"
    last = next((ln for ln in reversed(out.strip().splitlines()) if ln.strip()), "no output")
    return f"gdb could not attach to {where}: {last.strip()}"
