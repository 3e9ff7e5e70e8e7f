"""Foreign load beside a program under test: what real machines have (a colleague's job, a cron job).

    spin     one process spinning on a core throughout (a laptop's busy tab, a shared node)
    bursty   one core busy 2 s of every 6 s (a periodic job: log shipping, a monitoring scrape)
    compile  Python byte-compiling the standard library over and over (real work, ~0.8 core, with I/O)

`python tests/neighbours.py MODE` runs one until killed (for experiments by hand); the suite starts them
through `PINCHPOINT_TEST_BUSY` (tests/conftest.py: a count of spinners, or a mode's name).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

BURST_S, PERIOD_S = 2.0, 6.0

SPIN = "while True: pass"
BURSTY = f"""
import time
while True:
    end = time.monotonic() + {BURST_S}
    while time.monotonic() < end:
        pass
    time.sleep({PERIOD_S - BURST_S})
"""
COMPILE = f"""
import pathlib, py_compile, tempfile
sources = sorted(pathlib.Path({sysconfig.get_paths()["stdlib"]!r}).rglob("*.py"))
with tempfile.TemporaryDirectory() as d:
    while True:
        for src in sources:
            try:
                py_compile.compile(str(src), cfile=d + "/out.pyc", doraise=True)
            except (py_compile.PyCompileError, OSError, ValueError):
                pass
"""
MODES = {"spin": SPIN, "bursty": BURSTY, "compile": COMPILE}


def start(mode: str) -> subprocess.Popen[bytes]:
    """One neighbour process of `mode`, its output discarded (the caller kills it)."""
    return subprocess.Popen(
        [sys.executable, "-c", MODES[mode]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: python tests/neighbours.py {{{','.join(MODES)}}}")
    os.execv(sys.executable, [sys.executable, "-c", MODES[sys.argv[1]]])  # (killing this pid stops it)
