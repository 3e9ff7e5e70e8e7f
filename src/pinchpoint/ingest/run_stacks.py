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
from pinchpoint.ingest.stacks import parse_folded, read_folded
from pinchpoint.trace.stacks import Frame, Stacks, StackSample, TimedSample


def run_stacks(path: Path, warnings: list[str]) -> Stacks | None:
    """`stacks.folded` (py-spy), when the run asked for stacks; what went wrong otherwise. Else the
    default sampler's `pystacks-PID.json` files, when there are any."""
    meta = load_json(path / "stacks.json", []) if (path / "stacks.json").is_file() else None
    if not isinstance(meta, dict):
        return own_stacks(path, warnings)
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


def own_stacks(path: Path, warnings: list[str]) -> Stacks | None:
    """The default sampler's files (`capture/pysampler.py`), one per process: the stacks (py-spy's
    folded form) and the samples in time. A stack's count is the CPU time its samples carried, in
    samples; the timeline keeps each sample with its wall time. Unreadable files are skipped, said."""
    merged: dict[tuple[int | None, str | None, tuple[Frame, ...]], StackSample] = {}
    cpu: dict[tuple[int | None, str | None, tuple[Frame, ...]], int] = {}
    timeline: list[TimedSample] = []
    rate = None
    files = sorted(path.glob("pystacks-*.json"))
    for file in files:
        doc = load_json(file, [])
        try:
            rate = float(doc["rate_hz"])
            folded = [str(t) for t in doc["stacks"]]
            samples = [(int(t), int(i), int(c), int(w)) for t, i, c, w in doc["samples"]]
            parsed = [parse_folded(f"{t} 1")[0].samples for t in folded]
        except (KeyError, TypeError, ValueError) as exc:
            warnings.append(f"{file.name}: not a stack file pinchpoint wrote ({type(exc).__name__}): skipped")
            continue
        stacks = []
        for one in parsed:
            s = one[0] if one else StackSample(frames=(), count=0)
            key = (s.pid, s.thread, s.frames)
            stacks.append(merged.setdefault(key, s))
        for t, i, c, w in samples:
            if 0 <= i < len(stacks) and stacks[i].frames:
                s = stacks[i]
                timeline.append(TimedSample(t_ns=t, stack=s, cpu_ns=max(0, c), wall_ns=max(0, w)))
                key = (s.pid, s.thread, s.frames)
                cpu[key] = cpu.get(key, 0) + max(0, c)
    if rate is None or rate <= 0 or not timeline:
        return None
    weighed = tuple(
        dataclasses.replace(s, count=n)
        for key, s in merged.items()
        if (n := round(cpu.get(key, 0) * rate / 1e9)) > 0
    )
    timeline.sort(key=lambda t: t.t_ns)
    return Stacks(samples=weighed, rate_hz=rate, source="pinchpoint", timeline=tuple(timeline))


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
