"""Which Python functions the samples landed in: the DataLoader's work and the loop's own Python.

A sample is charged to its deepest frame in the program's own code (not the standard library, not an
installed package, not pinchpoint): a transform that spends its time inside numpy is the transform's
cost, and the numpy function it called is named beside it. Two scopes per rank:

  loader  samples of the DataLoader worker processes, and of the training process inside a dataset
          fetch (num_workers=0): what makes a batch expensive to produce.
  host    samples of the training process's main thread inside the loop's body (`LoopSite`, when
          the capture found the loop) and outside model calls, backward, the optimizer, the
          DataLoader and torch.save: the loop's own Python (metrics, logging, per-item
          conversions), which the phase timings can only call host_other. Imports, building the
          model and data, and evaluation after the loop are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from pinchpoint.trace.run import LoopSite
from pinchpoint.trace.stacks import OWN_FILE, Frame, Stacks, StackSample

TOP_FRAMES = 3
_LIBRARY = re.compile(r"(^<)|(/site-packages/)|(/dist-packages/)|(/lib/python\d+\.\d+/)")
_FETCH_FILE = "torch/utils/data/_utils/fetch.py"
_FRAMEWORK_PHASES = (
    ("torch/nn/modules/module.py", "_call_impl"),
    ("torch/autograd/__init__.py", None),
    ("torch/_tensor.py", "backward"),
    ("torch/optim/", None),
    ("torch/serialization.py", None),
    ("torch/utils/data/", None),
)
"""Frames that mark a sample as inside a phase the agent already times."""
_MAIN_ROOTS = frozenset({"<module>", "_run_module_as_main", "_run_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class HotFunction:
    frame: Frame
    """The function at its hottest line."""
    label: str
    """`function (file.py:12)`, the path relative to the program's directory when under it."""
    share: float
    """Of the scope's samples, all lines of the function together."""
    calls_into: str | None = None
    """The library function it was most often inside (`array_equal (numpy/core/numeric.py)`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackScope:
    name: str
    samples: int
    seconds: float | None
    top: tuple[HotFunction, ...] = ()
    within: str | None = None
    """Where the scope's samples were taken from, when narrower than the process (`lines 40-58 of
    train.py`: the loop's body)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StackSummary:
    loader: StackScope | None = None
    host: StackScope | None = None


def is_library(frame: Frame) -> bool:
    return not frame.file or frame.native or is_library_file(frame.file)


def is_library_file(path: str) -> bool:
    """Installed packages, the standard library, or no real file (`<string>`)."""
    return _LIBRARY.search(path) is not None


def stack_summary(
    stacks: Stacks,
    main_pids: Iterable[int],
    worker_pids: Iterable[int],
    cwd: str = "",
    loop: LoopSite | None = None,
) -> StackSummary:
    mains, workers = set(main_pids), set(worker_pids)
    loader: list[StackSample] = []
    host: list[StackSample] = []
    for s in stacks.samples:
        if s.frames and s.frames[-1].file == OWN_FILE:
            continue  # pinchpoint's own work (the loader probe fetching the program's batches): not the program's
        if s.pid in workers:
            loader.append(s)
        elif s.pid in mains or (s.pid is None and not workers):
            if any(f.file.endswith(_FETCH_FILE) for f in s.frames):
                loader.append(s)
            elif _on_main_thread(s) and not _in_timed_phase(s) and _in_loop(s, loop):
                host.append(s)
    host_scope = scope_of("host", host, stacks.rate_hz, cwd)
    if host_scope is not None and loop is not None:
        where = display_path(loop.file, cwd)
        host_scope = replace(host_scope, within=f"lines {loop.first_line}-{loop.last_line} of {where}")
    return StackSummary(loader=scope_of("loader", loader, stacks.rate_hz, cwd), host=host_scope)


def loop_samples(stacks: Stacks, loops: Mapping[int, LoopSite]) -> Stacks:
    """The samples of the loops' own work: a training process's samples inside its loop's lines (`loops`:
    main pid -> its loop), every other process's (DataLoader workers) as they are."""
    kept = tuple(
        s for s in stacks.samples if s.pid is None or s.pid not in loops or _in_loop(s, loops[s.pid])
    )
    return replace(stacks, samples=kept)


def _in_loop(s: StackSample, loop: LoopSite | None) -> bool:
    """Inside the loop's body, or anywhere when the loop is not known."""
    return loop is None or any(loop.holds(f.file, f.function, f.line) for f in s.frames)


def _on_main_thread(s: StackSample) -> bool:
    return bool(s.frames) and s.frames[0].function in _MAIN_ROOTS


def _in_timed_phase(s: StackSample) -> bool:
    for f in s.frames:
        name = f.function.rpartition(".")[2]  # py-spy writes qualified names: Module._call_impl
        for file, fn in _FRAMEWORK_PHASES:
            if file in f.file and (fn is None or name == fn):
                return True
    return False


def scope_of(name: str, samples: list[StackSample], rate_hz: float | None, cwd: str) -> StackScope | None:
    """Samples charged per function (file and name; its lines summed), the hottest line named."""
    total = sum(s.count for s in samples)
    if total == 0:
        return None
    own: dict[tuple[str, str], int] = {}
    lines: dict[tuple[str, str], dict[Frame, int]] = {}
    callees: dict[tuple[str, str], dict[str, int]] = {}
    for s in samples:
        i = _deepest_user_frame(s.frames)
        if i is None:
            continue
        frame = s.frames[i]
        key = (frame.file, frame.function)
        own[key] = own.get(key, 0) + s.count
        by_line = lines.setdefault(key, {})
        by_line[frame] = by_line.get(frame, 0) + s.count
        lib = next((f for f in s.frames[i + 1 :] if is_library(f)), None)
        if lib is not None:
            by = callees.setdefault(key, {})
            by[_short(lib)] = by.get(_short(lib), 0) + s.count
    top = []
    for key, n in sorted(own.items(), key=lambda kv: -kv[1])[:TOP_FRAMES]:
        frame = max(lines[key].items(), key=lambda kv: kv[1])[0]
        into = max(callees[key].items(), key=lambda kv: kv[1])[0] if key in callees else None
        top.append(
            HotFunction(frame=frame, label=display_label(frame, cwd), share=n / total, calls_into=into)
        )
    return StackScope(name=name, samples=total, seconds=total / rate_hz if rate_hz else None, top=tuple(top))


_COMPREHENSIONS = ("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")


def _deepest_user_frame(frames: tuple[Frame, ...]) -> int | None:
    """The innermost frame of the program's own code; a comprehension counts as the function that
    holds it (Python 3.12 inlines them, PEP 709: this reads 3.11 the same way)."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        if is_library(f) or f.function in _MAIN_ROOTS:
            continue
        if f.function.endswith(_COMPREHENSIONS) and i > 0 and frames[i - 1].file == f.file:
            continue
        return i
    return None


def _short(frame: Frame) -> str:
    """`function (package/module.py)`: a library frame without the install prefix."""
    path = frame.file
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        m = re.search(r"/lib/python\d+\.\d+/(.*)$", path)
        if m:
            path = m.group(1)
    return f"{frame.function} ({path})" if path else frame.function


def display_label(frame: Frame, cwd: str = "") -> str:
    """`function (file.py:12)` with the path relative to the program's directory when under it."""
    path = display_path(frame.file, cwd)
    where = path if frame.line is None else f"{path}:{frame.line}"
    return f"{frame.function} ({where})" if path else frame.function


def display_path(path: str, cwd: str = "") -> str:
    """The path relative to the program's directory when under it."""
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path
