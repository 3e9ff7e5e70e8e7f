"""The malloc replacements `pinchpoint try` preloads for an allocator finding, when installed here:
jemalloc and tcmalloc (`LD_PRELOAD`), found where Debian, Fedora, conda and /usr/local put them.

Whether one pays depends on the program and the machine, so `try` measures each: allocator_churn.py on
this AMD machine ran ×1.25 with tcmalloc, ×1.2 with glibc's thresholds, and ×0.85-0.95 with jemalloc
(decision 54)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

PRELOADS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so.1", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
}
INSTALL = {
    "jemalloc": "Debian/Ubuntu: apt-get install libjemalloc2; conda: conda install jemalloc",
    "tcmalloc": "Debian/Ubuntu: apt-get install libtcmalloc-minimal4; conda: conda install gperftools",
}


def lib_dirs() -> list[Path]:
    """Where the libraries are looked for, the program's own environment first."""
    dirs = [Path(sys.prefix) / "lib"]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(Path(os.environ["CONDA_PREFIX"]) / "lib")
    dirs += [
        Path("/usr/lib/x86_64-linux-gnu"),
        Path("/usr/lib/aarch64-linux-gnu"),
        Path("/usr/lib64"),
        Path("/usr/lib"),
        Path("/usr/local/lib"),
    ]
    return dirs


def find(name: str, dirs: list[Path] | None = None) -> Path | None:
    """The installed library of allocator `name` (a key of PRELOADS), or None."""
    for d in dirs if dirs is not None else lib_dirs():
        for lib in PRELOADS[name]:
            if (d / lib).is_file():
                return d / lib
    return None


def ld_preload(lib: Path) -> str:
    """`LD_PRELOAD` with `lib` first, keeping what the environment preloads already."""
    existing = os.environ.get("LD_PRELOAD", "").strip()
    return f"{lib}:{existing}" if existing else str(lib)
