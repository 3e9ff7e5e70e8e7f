"""The framework entry points the agent wraps: DataLoader iteration and fetches, top-level module
calls, backward, optimizer steps, torch.save (and, on CUDA, `cuda_hooks`; with torch.distributed,
`dist_hooks`). Each records a phase
interval on the training thread and calls through unchanged; none raises for the program's sake."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pinchpoint.capture import dist_hooks, loader_probe, loop_shapes
from pinchpoint.capture.agent import INFERENCE_AFTER_CALLS, thread_schedstat

if TYPE_CHECKING:
    from pinchpoint.capture.agent import Agent

_now = time.monotonic_ns
_thread_cpu = time.thread_time_ns


def timed(
    agent: Agent, phase: str, fn: Callable[..., Any], when: Callable[..., bool] | None = None
) -> Callable[..., Any]:
    """Wrap `fn` so each call on the training thread records a `phase` interval (only when `when` holds)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if agent.role != "main" or threading.get_ident() != agent.tid:
            return fn(*args, **kwargs)
        if when is not None and not when(*args, **kwargs):
            return fn(*args, **kwargs)
        agent.begin(phase)
        t0 = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            agent.interval(phase, t0, _now())
            agent.end()

    return wrapper


def install_hooks(agent: Agent, torch: Any) -> None:
    from torch.utils.data import dataloader as dl_mod
    from torch.utils.data._utils import fetch as fetch_mod

    # DataLoader: time blocked in __next__, record the settings of every iterator.
    it_cls = dl_mod._BaseDataLoaderIter
    orig_next = it_cls.__next__

    def next_wrapper(self: Any) -> Any:
        if agent.role != "main" or threading.get_ident() != agent.tid or loader_probe.ACTIVE:
            return orig_next(self)  # (the loader probe's batches are pinchpoint's, not the program's)
        if agent.await_boundary:
            loop_shapes.boundary(agent, _now())
        agent.begin("data_wait")  # (before the clock: an annotation's task opens before its interval)
        t0 = _now()
        try:
            batch = orig_next(self)
            if agent.window.batch_spec is None and getattr(self, "_num_workers", 0) > 0:
                # Batches come from worker processes: the loader probe prices that transfer too.
                agent.window.batch_spec = loader_probe.batch_spec(batch)
            return batch
        finally:
            agent.interval("data_wait", t0, _now())
            agent.end()
            if not getattr(self, "_pinchpoint_seen", False):
                self._pinchpoint_seen = True
                _record_loader(agent, self)

    setattr(it_cls, "__next__", next_wrapper)  # noqa: B010 (mypy: assigning to a method)

    # Dataset fetchers: wall, on-CPU and run-queue time of each batch, in whichever process loads.
    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        cls = getattr(fetch_mod, name, None)
        if cls is not None:
            cls.fetch = _fetch_wrapper(agent, cls.fetch)

    # Top-level module calls: forward, and inference step ends.
    module_cls = torch.nn.Module
    orig_call = module_cls.__call__

    def call_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if agent.in_module or agent.role != "main" or threading.get_ident() != agent.tid:
            return orig_call(self, *args, **kwargs)
        agent.in_module = True
        if agent.autocast_dtype is None:
            agent.note_autocast()
        if agent.await_boundary:
            loop_shapes.boundary(agent, _now())
        agent.begin("forward")
        t0 = _now()
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            agent.in_module = False
            t1 = _now()
            agent.interval("forward", t0, t1)
            agent.end()
            _after_top_level_call(agent, torch, self, t1)

    module_cls.__call__ = call_wrapper

    torch.autograd.backward = dist_hooks.blocked_backward(agent, torch.autograd.backward)
    torch.autograd.grad = dist_hooks.blocked_backward(agent, torch.autograd.grad)
    torch.save = timed(agent, "checkpoint_io", torch.save)

    from torch.optim import optimizer as opt_mod

    def pre_hook(opt: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if agent.role != "main" or threading.get_ident() != agent.tid:
            return None
        agent.begin("optimizer")
        agent.in_optimizer = True
        agent.opt_start_ns = _now()
        return _with_timed_closure(agent, args, kwargs)

    def post_hook(opt: Any, args: Any, kwargs: Any) -> None:
        if agent.role != "main" or threading.get_ident() != agent.tid:
            return
        t1 = _now()
        agent.in_optimizer = False
        agent.interval("optimizer", agent.opt_start_ns or t1, t1)
        agent.end()
        loop_shapes.optimizer_stepped(agent)
        if agent.mode in ("unknown", "inference"):
            agent.mode = "train"
        if agent.mode != "train":
            return
        if agent.lead_optimizer is None or agent.opt_cycle:
            loop_shapes.optimizer_stepped_first_cycle(agent, id(opt), t1)
        elif id(opt) == agent.lead_optimizer:
            agent.end_step("train", t1)

    opt_mod.register_optimizer_step_pre_hook(pre_hook)
    opt_mod.register_optimizer_step_post_hook(post_hook)

    from pinchpoint.capture import cuda_hooks

    cuda_hooks.install(agent, torch)
    dist_hooks.install(agent, torch, timed)


def _with_timed_closure(agent: Agent, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
    """`optimizer.step(closure)` (LBFGS, Lightning's automatic optimization): each evaluation of the
    closure holds the step's forward and backward, not the optimizer's update. The optimizer's
    interval is cut at each closure, so it keeps only its own update; inside the closure, module calls
    are forward, backward is backward, and the rest (a functional loss, zero_grad, a framework's own
    machinery) is the loop's, as it is in a loop that calls them itself."""
    if "closure" in kwargs:
        closure = kwargs["closure"]
        if not callable(closure):
            return None
        return args, {**kwargs, "closure": _timed_closure(agent, closure)}
    if len(args) >= 2 and callable(args[1]):  # (the hook's args start with the optimizer itself)
        return (args[0], _timed_closure(agent, args[1]), *args[2:]), kwargs
    return None


def _timed_closure(agent: Agent, closure: Callable[..., Any]) -> Callable[..., Any]:
    def timed_closure(*a: Any, **kw: Any) -> Any:
        t0 = _now()
        if agent.in_optimizer:  # the update so far; the closure is not the optimizer's
            agent.interval("optimizer", agent.opt_start_ns, t0)
        try:
            return closure(*a, **kw)
        finally:
            agent.opt_start_ns = _now()

    return timed_closure


def _after_top_level_call(agent: Agent, torch: Any, module: Any, t1: int) -> None:
    if agent.mode == "inference":
        agent.end_step("inference", t1)
        return
    if agent.mode in ("train", "manual"):
        if torch.is_grad_enabled():
            if module.training:
                loop_shapes.note_trained(agent, module)
        elif (
            not module.training
            and id(module) in agent.trained_modules
            and not any(iv[0] == "backward" for iv in agent.intervals)
        ):
            loop_shapes.eval_step(agent, t1)  # evaluation inside training: a step of its own kind
        return
    if agent.mode != "unknown":
        return
    if module.training:
        loop_shapes.note_trained(agent, module)
    if not torch.is_grad_enabled():
        agent.mode = "inference"
        agent.end_step("inference", t1)
        return
    key = id(module)
    n = agent.calls_without_backward.get(key, 0) + 1
    agent.calls_without_backward[key] = n
    if n >= INFERENCE_AFTER_CALLS:
        agent.mode = "inference"
        agent.end_step("inference", t1)


def _fetch_wrapper(agent: Agent, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, possibly_batched_index: Any) -> Any:
        if loader_probe.ACTIVE:  # (also in the probe's forked worker: it inherits the flag)
            return fn(self, possibly_batched_index)
        s0 = thread_schedstat()
        c0 = _thread_cpu()
        t0 = _now()
        try:
            batch = fn(self, possibly_batched_index)
            if agent.role == "main" and agent.window.batch_spec is None:
                # The batch's shapes, once: the loader probe passes one like it through a worker.
                agent.window.batch_spec = loader_probe.batch_spec(batch)
            return batch
        finally:
            t1 = _now()
            c1 = _thread_cpu()
            s1 = thread_schedstat()
            runq = s1[1] - s0[1] if (s0 is not None and s1 is not None) else None
            agent.fetches.add(
                {
                    "start_ns": t0,
                    "end_ns": t1,
                    "cpu_ns": c1 - c0,
                    "runq_ns": runq,
                    "worker_id": _worker_id(agent),
                }
            )
            # Workers flush per batch (they can be killed at any time); the main process per step.
            if agent.role == "worker":
                agent.fetches.flush()

    return wrapper


def _worker_id(agent: Agent) -> int | None:
    with contextlib.suppress(Exception):
        info = agent.torch.utils.data.get_worker_info()
        if info is not None:
            return int(info.id)
    return None


def _record_loader(agent: Agent, it: Any) -> None:
    with contextlib.suppress(Exception):
        sampler = getattr(it, "_index_sampler", None)
        workers = getattr(it, "_workers", None) or []
        agent.loaders.add(
            {
                "t_ns": _now(),
                "num_workers": int(getattr(it, "_num_workers", 0)),
                "pin_memory": bool(getattr(it, "_pin_memory", False)),
                "prefetch_factor": getattr(it, "_prefetch_factor", None),
                "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
                "batch_size": getattr(sampler, "batch_size", None),
                "dataset": type(getattr(it, "_dataset", None)).__name__,
                "worker_pids": [int(w.pid) for w in workers if getattr(w, "pid", None)],
            }
        )
        agent.loaders.flush()
