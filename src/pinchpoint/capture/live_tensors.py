"""Which tensors are alive between steps: two snapshots a few steps apart, taken once memory has risen
well above where it settled (`LeakWatch`), so growth per step can name what a leaking loop keeps
(tensors that still carry their autograd graph, typically). They go to `live_tensors.json`.

A walk over the garbage collector's objects (~30-60 ms for 170-290k objects here), done outside the
timed steps. Tensors are told by their exact type among Tensor's subclasses, not `isinstance` (which
asks `__class__` and can trigger module deprecation warnings in the program's stderr). Storage bytes
count each storage once.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pinchpoint.capture.writer import write_json_atomic

TOP_GROUPS = 12
FILE = "live_tensors.json"
RISE_BYTES = 16 << 20
"""The floor of memory in use (the lowest of the last `FLOOR_STEPS` of the program's own steps) risen
this much above its first floor after warm-up, and beyond how far the first steps swung, starts the
snapshots. memory.leak, their only reader, needs 32 MiB of growth; a healthy loop's resident memory
swings 4-5 MiB between step ends here, a 48-layer MLP's 125 MiB, and the allocator trial's steps add
20 MiB (trial and profiled steps are not watched). Taken at the op window's edges in every run, the
two walks over ~290k objects cost a small program 115 ms; now a program whose memory stays flat pays
nothing."""
FLOOR_STEPS = 4
WARM_STEPS = 2
SPAN = 3
"""Steps between the two snapshots."""


class LeakWatch:
    """Watches resident memory (and CUDA's allocated bytes) at each step's end; once its floor rose
    (`RISE_BYTES`), snapshots the live tensors, and again `SPAN` steps later."""

    def __init__(self) -> None:
        self.state = "watching"  # -> counting -> done
        self.early: list[int] = []
        """Memory in use at the first `FLOOR_STEPS` watched steps (their lowest: the first floor)."""
        self.recent: list[int] = []
        self.floor = self.rise = 0
        """The first floor, and the rise above it that starts the snapshots (beyond the first swing)."""
        self.first = 0
        self.before: dict[str, Any] | None = None

    def observe(
        self, torch: Any, record: dict[str, Any], rank_dir: Path, settle: Callable[[], None] = lambda: None
    ) -> bool:
        """At a step's end (`record`: its steps.jsonl line). True when a snapshot took time between this
        step and the next (`settle` is called first: the agent reads its counters before it)."""
        if self.state == "done" or torch is None or record["partial"]:
            return False
        step = record["step"]
        if self.state == "counting":
            if step - self.first < SPAN:
                return False
            self.state = "done"
            settle()
            with contextlib.suppress(Exception):
                after = live_tensors(torch)
                write_json_atomic(
                    rank_dir / FILE,
                    {
                        "before": self.before,
                        "after": after,
                        "steps": step - self.first,
                        "from_step": self.first,
                    },
                )
            return True
        if record["profiled"] or record["trial"] or step < WARM_STEPS:
            return False
        amount = _in_use(torch, record["rss_bytes"])
        if amount is None:
            return False
        if len(self.early) < FLOOR_STEPS:
            self.early.append(amount)
            if len(self.early) == FLOOR_STEPS:
                self.floor, self.rise = min(self.early), max(RISE_BYTES, max(self.early) - min(self.early))
            return False
        self.recent = [*self.recent[1 - FLOOR_STEPS :], amount]
        if len(self.recent) < FLOOR_STEPS or min(self.recent) - self.floor < self.rise:
            return False
        settle()
        try:
            self.before = live_tensors(torch)
        except Exception:
            self.state = "done"
            return True
        self.state, self.first = "counting", step
        return True


def _in_use(torch: Any, rss: int | None) -> int | None:
    """Resident bytes, and a CUDA program's allocated device bytes (its leaks live there)."""
    if rss is None:
        return None
    with contextlib.suppress(Exception):
        if torch.cuda.is_initialized():
            return rss + int(torch.cuda.memory_allocated())
    return rss


def _tensor_types(tensor: type) -> set[type]:
    """`torch.Tensor` and every subclass defined so far (Parameter, the program's own): a set lookup
    per object costs a fifth of `issubclass` (the walk took 70 ms of a program's time, 26 ms of it
    asking each of ~170k objects whether it is a tensor)."""
    found: set[type] = {tensor}
    todo: list[type] = [tensor]
    while todo:
        subs: list[type] = todo.pop().__subclasses__()
        for sub in subs:
            if sub not in found and not sub.__module__.startswith(COMPILE_TIME):
                found.add(sub)
                todo.append(sub)
    return found


COMPILE_TIME = "torch._subclasses"
"""FakeTensor and FunctionalTensor: what torch.compile traced with, no memory of the program's (and
asking a FakeTensor for its storage warns)."""


def live_tensors(torch: Any) -> dict[str, Any]:
    tensor = torch.Tensor
    count = with_graph = 0
    nbytes = graph_bytes = 0
    seen: set[int] = set()
    groups: dict[tuple[tuple[int, ...], str, str], list[int]] = {}
    types = _tensor_types(tensor)
    for o in gc.get_objects():
        if type(o) not in types:
            continue
        count += 1
        try:
            storage = o.untyped_storage()
            key, size = int(storage.data_ptr()), int(storage.nbytes())
        except Exception:  # sparse, meta or otherwise storage-less tensors
            key, size = id(o), 0
        new = key not in seen
        if new:
            seen.add(key)
            nbytes += size
        fn = o.grad_fn
        if fn is not None:
            with_graph += 1
            if new:
                graph_bytes += size
            g = (tuple(int(d) for d in o.shape), str(o.dtype).removeprefix("torch."), type(fn).__name__)
            acc = groups.setdefault(g, [0, 0])
            acc[0] += 1
            acc[1] += size if new else 0
    top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:TOP_GROUPS]
    return {
        "count": count,
        "bytes": nbytes,
        "with_graph": with_graph,
        "graph_bytes": graph_bytes,
        "graph_groups": [
            {"shape": list(shape), "dtype": dtype, "grad_fn": fn, "count": n, "bytes": b}
            for (shape, dtype, fn), (n, b) in top
        ],
    }
