"""torch.distributed: time in collectives (`comm`) and what DDP was set up with.

  `torch.distributed.all_reduce`, `all_gather`, `broadcast`, `barrier`, ... (called from Python) -> comm
  `Work.wait()` on an async collective                                                         -> comm
  DDP's gradient all-reduce inside `backward()` (CPU models)                                    -> comm

DDP all-reduces gradients from C++ (its reducer), during backward, and waits for the last bucket at
backward's end. On a CPU model the training thread computes the whole backward itself, so the time it
spends blocked inside backward (wall minus on-CPU minus waiting for a core) is that wait: the
communication backward did not hide, plus any wait for a slower rank. It is recorded as a `comm`
interval at the end of the backward interval, where the reducer waits. (On a CUDA model the host
thread blocks for the device too; there the op window's device timeline measures communication.)

`distributed.jsonl` gets one line per DDP model: backend, world size, gradient bytes, bucket cap,
static_graph / find_unused_parameters / gradient_as_bucket_view, and any comm hook registered later.
Nothing here runs, and nothing is wrapped, unless the program uses torch.distributed.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from pinchpoint.capture import loop_shapes
from pinchpoint.capture.appliers import Applier
from pinchpoint.capture.patches import PATCHES
from pinchpoint.capture.procfs import thread_schedstat
from pinchpoint.capture.roles import Role
from pinchpoint.capture.step_state import Counters, StepState
from pinchpoint.capture.writer import JsonlWriter


class DistAgent(Protocol):
    """What the distributed hooks and the backward wrapper need from the agent (`agent.Agent`)."""

    shape: loop_shapes.LoopState
    detector: loop_shapes.StepDetector
    intervals: list[list[Any]]
    window: Any
    ddp_on_cpu: bool
    """A CPU model is wrapped in DDP: backward's blocked time is its gradient all-reduce wait."""
    applier: Applier | None
    """`pinchpoint try`'s fixes, when this is a trial run."""

    @property
    def role(self) -> Role: ...
    @property
    def tid(self) -> int: ...
    @property
    def step(self) -> StepState: ...
    @property
    def distributed(self) -> JsonlWriter: ...
    def counters(self) -> Counters: ...
    def end_step(
        self, kind: str, end_ns: int | None = None, partial: bool = False, counters: Counters | None = None
    ) -> None: ...
    def begin(self, phase: str) -> None: ...
    def end(self) -> None: ...
    def interval(
        self, phase: str, start_ns: int, end_ns: int, what: str | None = None, nbytes: int | None = None
    ) -> None: ...
    def become_rank(self, rank: int) -> None: ...
    def become_launcher(self) -> None: ...


_now = time.monotonic_ns
_thread_cpu = time.thread_time_ns

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "all_gather_object",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
    "batch_isend_irecv",
)
"""Called from Python: FSDP2 gathers and reduce-scatters through the `*_single` names (torch 2.13), the
pipelining schedules send and receive activations (`batch_isend_irecv`, then `Work.wait()`)."""
BLOCKED_MIN_NS = 50_000
"""Blocked time inside one backward below this is scheduling noise, not a wait for the network."""


def install(agent: DistAgent, torch: Any) -> None:
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return
    for name in COLLECTIVES:
        fn = getattr(dist, name, None)
        if callable(fn):
            PATCHES.set(dist, name, _collective(agent, name, fn))
    init = getattr(dist, "init_process_group", None)
    if callable(init):
        PATCHES.set(dist, "init_process_group", _after_init(agent, dist, init))
    with contextlib.suppress(Exception):
        import importlib

        # (`import torch.multiprocessing.spawn as m` would bind the function `spawn`, not the module)
        mp_spawn = importlib.import_module("torch.multiprocessing.spawn")
        for mod in (mp_spawn, torch.multiprocessing):
            start = getattr(mod, "start_processes", None)
            if callable(start):
                PATCHES.set(mod, "start_processes", _launching(agent, start))
    with contextlib.suppress(Exception):  # a pybind class may refuse new attributes
        work = torch._C._distributed_c10d.Work
        PATCHES.set(work, "wait", _waited(agent, work.wait, None))
    with contextlib.suppress(Exception):
        from torch.nn.parallel import DistributedDataParallel as ddp_cls

        _wrap_ddp(agent, ddp_cls)


ISSUED_MAX = 4096
"""Async collectives remembered until waited (`_ISSUED`): a program that never waits some is capped."""
_INSIDE = [0]
"""Collectives in progress on the training thread: a wait inside one (a blocking call waits for its own
`Work`) is that call's time, not a second interval."""
_ISSUED: dict[int, tuple[str, int | None]] = {}
"""id(Work) of an async collective issued on the training thread -> (its name, its bytes), until
`Work.wait()` records the wait under that name."""


def _nbytes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The largest tensor a collective names (the gathered or the reduced size), in bytes."""
    sizes = [
        n
        for v in (*args, *kwargs.values())
        for t in (v if isinstance(v, (list, tuple)) else (v,))
        if isinstance(n := getattr(t, "nbytes", None), int)
    ]
    return max(sizes) if sizes else None


def _collective(agent: DistAgent, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` timed as `comm` on the training thread, the interval named and sized; an async call's
    `Work` remembered so its wait is named too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid or _compiling():
            return fn(*args, **kwargs)
        agent.begin("comm")
        t0 = _now()
        out = None
        _INSIDE[0] += 1
        try:
            out = fn(*args, **kwargs)
            return out
        finally:
            _INSIDE[0] -= 1
            nbytes = _nbytes(args, kwargs)
            agent.interval("comm", t0, _now(), name, nbytes)
            agent.end()
            for work in out if isinstance(out, list) else (out,):
                if work is not None and hasattr(work, "wait"):
                    if len(_ISSUED) >= ISSUED_MAX:
                        _ISSUED.clear()
                    # (a functional collective's tensor is waited for through its `elem`)
                    _ISSUED[id(getattr(work, "elem", work))] = (name, nbytes)

    return wrapper


def _waited(agent: DistAgent, fn: Callable[..., Any], unknown: str | None) -> Callable[..., Any]:
    """A wait (`Work.wait`, or `wait_tensor` on a functional collective's tensor) timed as `comm` on the
    training thread, under the name of the collective it waits for (`unknown` when not issued here)."""

    @functools.wraps(fn)
    def wrapper(waited: Any, *args: Any, **kwargs: Any) -> Any:
        issued = _ISSUED.pop(id(waited), None)
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid or _INSIDE[0] or _compiling():
            return fn(waited, *args, **kwargs)
        agent.begin("comm")
        t0 = _now()
        try:
            return fn(waited, *args, **kwargs)
        finally:
            if issued is None:
                agent.interval("comm", t0, _now(), unknown)
            else:
                agent.interval("comm", t0, _now(), f"{issued[0]}.wait", issued[1])
            agent.end()

    return wrapper


def _after_init(agent: DistAgent, dist: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    """init_process_group, then the agent learns this process's rank (a spawned rank starts as a worker)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        with contextlib.suppress(Exception):
            agent.become_rank(int(dist.get_rank()))
        _wrap_functional(agent)
        wrap_pipelining(agent)
        return result

    return wrapper


FUNCTIONAL = ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast")
"""torch.distributed's functional collectives, which DTensor (tensor parallelism) calls: each returns a
tensor whose first use waits (`wait_tensor`)."""


def _wrap_functional(agent: DistAgent) -> None:
    """The functional collectives named `functional.NAME`, their waits under the same name. Wrapped
    once a process group exists (a program without one never imports them for us)."""
    with contextlib.suppress(Exception):
        import importlib

        funcol = importlib.import_module("torch.distributed._functional_collectives")
        if getattr(funcol.wait_tensor, "__wrapped__", None) is not None:
            return  # (a second process group)
        for name in FUNCTIONAL:
            fn = getattr(funcol, name, None)
            if callable(fn):
                PATCHES.set(funcol, name, _collective(agent, f"functional.{name}", fn))
        PATCHES.set(funcol, "wait_tensor", _waited(agent, funcol.wait_tensor, "functional.collective.wait"))


def wrap_pipelining(agent: DistAgent) -> None:
    """`torch.distributed.pipelining`'s schedules, where the program imported them: each schedule's
    settings written once, at its first `step` (class, microbatches, stages, this rank's stages)."""
    schedules = sys.modules.get("torch.distributed.pipelining.schedules")
    if schedules is None:
        return
    for name in ("PipelineScheduleSingle", "PipelineScheduleMulti"):
        cls = getattr(schedules, name, None)
        step = getattr(cls, "step", None)
        if cls is not None and callable(step) and getattr(step, "__wrapped__", None) is None:
            with contextlib.suppress(Exception):
                PATCHES.set(cls, "step", _noted_schedule(agent, step))


_SCHEDULES: set[int] = set()


def _noted_schedule(agent: DistAgent, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in _SCHEDULES and agent.role is Role.MAIN:
            _SCHEDULES.add(id(self))
            with contextlib.suppress(Exception):
                agent.distributed.add(pipeline_settings(self))
                agent.distributed.flush()
        return fn(self, *args, **kwargs)

    return wrapper


def pipeline_settings(schedule: Any) -> dict[str, Any]:
    """distributed.jsonl's `pipeline` line for a schedule (torch 2.13's attributes)."""
    stages = getattr(schedule, "_stages", None) or [getattr(schedule, "_stage", None)]
    return {
        "t_ns": time.monotonic_ns(),
        "kind": "pipeline",
        "schedule": type(schedule).__name__,
        "microbatches": _int_attr(schedule, "_n_microbatches"),
        "stages": _int_attr(schedule, "_num_stages"),
        "stage_indices": [i for st in stages if (i := _int_attr(st, "stage_index")) is not None],
    }


def _compiling() -> bool:
    """Inside torch.compile's tracing: nothing is timed there (the compiled graph runs the collective)."""
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.compiler.is_compiling())
    except Exception:
        return False


def _launching(agent: DistAgent, fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.multiprocessing.spawn/start_processes: the caller starts ranks and is not one itself."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            agent.become_launcher()
        return fn(*args, **kwargs)

    return wrapper


def _wrap_ddp(agent: DistAgent, ddp_cls: Any) -> None:
    orig_init = ddp_cls.__init__
    orig_hook = ddp_cls.register_comm_hook

    @functools.wraps(orig_init)
    def init_wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        if agent.role is Role.MAIN:
            with contextlib.suppress(Exception):
                _record_ddp(agent, self)

    @functools.wraps(orig_hook)
    def hook_wrapper(self: Any, state: Any, hook: Any) -> Any:
        result = orig_hook(self, state, hook)
        if agent.role is Role.MAIN:
            with contextlib.suppress(Exception):
                agent.distributed.add({"t_ns": _now(), "kind": "comm_hook", "hook": _name_of(hook)})
                agent.distributed.flush()
        return result

    PATCHES.set(ddp_cls, "__init__", init_wrapper)
    PATCHES.set(ddp_cls, "register_comm_hook", hook_wrapper)


def _name_of(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__)


def _record_ddp(agent: DistAgent, ddp: Any) -> None:
    import torch.distributed as dist

    params = [p for p in ddp.module.parameters() if p.requires_grad]
    devices = sorted({p.device.type for p in params})
    on_cpu = devices == ["cpu"]
    if on_cpu:
        agent.ddp_on_cpu = True
    group = getattr(ddp, "process_group", None)
    agent.distributed.add(
        {
            "t_ns": _now(),
            "kind": "ddp",
            "backend": str(dist.get_backend(group)) if group is not None else str(dist.get_backend()),
            "world_size": int(dist.get_world_size(group))
            if group is not None
            else int(dist.get_world_size()),
            "devices": devices,
            "params": len(params),
            "grad_bytes": int(sum(p.numel() * p.element_size() for p in params)),
            "bucket_cap_bytes": _int_attr(ddp, "bucket_bytes_cap"),
            "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", False)),
            "static_graph": bool(getattr(ddp, "static_graph", False)),
            "gradient_as_bucket_view": bool(getattr(ddp, "gradient_as_bucket_view", False)),
        }
    )
    agent.distributed.flush()


def note_fsdp(agent: DistAgent) -> None:
    """Once the loop has trained a step: FSDP2's settings, where the trained modules are sharded, else
    tensor parallelism's, where their parameters are DTensors (and the pipelining schedules wrapped,
    for a program that imported them after its process group)."""
    wrap_pipelining(agent)
    if "torch.distributed.tensor" not in sys.modules:
        return  # (FSDP2 and tensor parallelism both import it)
    from pinchpoint.capture.fsdp import fsdp_modules, fsdp_settings
    from pinchpoint.capture.tensor_parallel import tp_settings

    trained = [m for ref in agent.shape.trained_refs if (m := ref()) is not None]
    modules = fsdp_modules(trained)
    line = fsdp_settings(modules) if modules else tp_settings(trained)
    if line is None:
        return
    agent.distributed.add(line)  # (as the program set it up: before a `try` run changes it)
    agent.distributed.flush()
    if modules and agent.applier is not None:
        agent.applier.sharded(modules)


def _int_attr(obj: Any, name: str) -> int | None:
    v = getattr(obj, name, None)
    return int(v) if isinstance(v, (int, float)) else None


def blocked_backward(agent: DistAgent, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (autograd.backward) timed as `backward`, and, once a CPU model is wrapped in DDP, the time
    the training thread spent blocked inside it as a `comm` interval at its end."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid:
            return fn(*args, **kwargs)
        agent.shape.calls_without_backward.clear()
        if agent.shape.mode in (loop_shapes.LoopMode.UNKNOWN, loop_shapes.LoopMode.INFERENCE):
            agent.detector.trains_now()
        watch = agent.ddp_on_cpu
        if watch:
            c0, s0 = _thread_cpu(), thread_schedstat()
        agent.begin("backward")
        t0 = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            t1 = _now()
            agent.interval("backward", t0, t1)
            agent.end()
            if (
                agent.shape.lead_optimizer is None
                and agent.shape.mode is not loop_shapes.LoopMode.EXPLICIT
                and not agent.shape.in_optimizer
            ):
                agent.shape.await_boundary = True  # (a manual-update loop's step may end at the next call)
                agent.shape.last_backward_end_ns = t1
                agent.detector.start_update_watch(sys.modules["torch"])
            if watch:
                s1 = thread_schedstat()
                runq = s1[1] - s0[1] if (s0 is not None and s1 is not None) else 0
                blocked = (t1 - t0) - (_thread_cpu() - c0) - runq
                if blocked >= BLOCKED_MIN_NS:
                    agent.interval("comm", t1 - blocked, t1, "ddp.all_reduce")

    return wrapper
