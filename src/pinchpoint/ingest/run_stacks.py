"""A run directory's stack samples: Python stacks (`stacks.folded`, py-spy, `run --stacks`) and native
stacks (`native.txt.gz`, perf script, `run --native`). A run that asked for them and got none says why
(the sampler's log) in the report's warnings."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from pinchpoint.errors import TraceError
from pinchpoint.ingest.fields import load_json
from pinchpoint.ingest.perf_script import read_perf_script
from pinchpoint.ingest.stacks import read_folded
from pinchpoint.trace.stacks import Stacks


def run_stacks(path: Path, warnings: list[str]) -> Stacks | None:
    """`stacks.folded` (py-spy), when the run asked for stacks; what went wrong otherwise."""
    meta = load_json(path / "stacks.json", []) if (path / "stacks.json").is_file() else None
    if not isinstance(meta, dict):
        return None
    folded = path / "stacks.folded"
    if not folded.is_file() or folded.stat().st_size == 0:
        warnings.append(_none_recorded("stacks", path / "stacks.log"))
        return None
    rate = meta.get("rate_hz")
    try:
        stacks, bad = read_folded(
            folded,
            rate_hz=float(rate) if isinstance(rate, (int, float)) and rate > 0 else None,
            source="py-spy",
        )
    except TraceError as exc:
        warnings.append(str(exc))
        return None
    if bad:
        warnings.append(f"{folded.name}: {bad} line(s) could not be read and were skipped")
    if meta.get("idle") is True:
        stacks = dataclasses.replace(stacks, idle_included=True)
    return _native_tails(stacks) if meta.get("native") is True else stacks


def _native_tails(stacks: Stacks) -> Stacks:
    """py-spy's native mode puts the interpreter's own C frames around the Python ones (libc's start,
    `Py_RunMain`, the eval loop between calls): keep the Python frames and, below the last of them,
    the native frames that ran for it (the op, BLAS or oneDNN kernel, OpenMP). The Python view is then
    the one `--stacks` alone gives, with what the leaf line was doing in native code beneath it."""
    samples = []
    for s in stacks.samples:
        py = [i for i, f in enumerate(s.frames) if not f.native]
        if not py:
            continue  # a thread with no Python frame (an OpenMP or allocator thread): perf covers it
        frames = tuple(s.frames[i] for i in py) + s.frames[py[-1] + 1 :]
        samples.append(dataclasses.replace(s, frames=frames))
    return dataclasses.replace(stacks, samples=tuple(samples))


def _none_recorded(what: str, log: Path) -> str:
    why = ""
    with contextlib.suppress(OSError, IndexError):
        why = log.read_text(errors="replace").strip().splitlines()[-1]
    return f"{what} were asked for but none were recorded{': ' + why if why else ''}"


def run_native(path: Path, warnings: list[str]) -> Stacks | None:
    """`native.txt.gz` (perf script), when the run asked for native stacks; what went wrong otherwise."""
    if not (path / "native.json").is_file():
        return None
    text = path / "native.txt.gz"
    if not text.is_file() or text.stat().st_size == 0:
        warnings.append(_none_recorded("native stacks", path / "native.log"))
        return None
    try:
        stacks, bad = read_perf_script(text)
    except TraceError as exc:
        warnings.append(str(exc))
        return None
    if bad:
        warnings.append(f"{text.name}: {bad} line(s) could not be read and were skipped")
    return stacks
