"""The framework entry points the agent wraps: DataLoader iteration and fetches, top-level module
calls, optimizer steps, torch.save (backward is `dist_hooks.blocked_backward`; on CUDA, `cuda_hooks`;
with torch.distributed, `dist_hooks`). Each records a phase interval on the training thread and calls
through unchanged; none raises for the program's sake.

The hooks only see calls and report them (`HookedAgent`); what a call means for the step in progress
(does it end one? is this loop training or inference?) is the agent's (`capture/agent.py`), which
imports this module: this one never imports the agent."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from pinchpoint.capture import graph_watch, loader_probe
from pinchpoint.capture.batch_probe import BatchProbe
from pinchpoint.capture.context_probe import ContextProbe
from pinchpoint.capture.patches import PATCHES
from pinchpoint.capture.procfs import thread_schedstat
from pinchpoint.capture.roles import Role
from pinchpoint.capture.served_calls import SERVED_ENV, ServedCalls, rows_of
from pinchpoint.capture.step_state import StepState
from pinchpoint.capture.trials import Trials

_now = time.monotonic_ns
_thread_cpu = time.thread_time_ns


class HookedAgent(Protocol):
    """What the hooks need from the agent (`agent.Agent`): the guards every wrapped call tests first
    (plain attributes: they are read on every module call), and the events the hooks report."""

    @property
    def role(self) -> str:
        """Only "main" records phases; a DataLoader worker records its fetches."""

    @property
    def tid(self) -> int:
        """The training thread."""

    @property
    def rank_dir(self) -> Path:
        """The rank's folder in the run directory (it moves when a spawned process learns its rank)."""

    @property
    def in_module(self) -> bool:
        """Inside a top-level module call: nested calls pass straight through."""

    @property
    def trials(self) -> Trials:
        """pinchpoint's trials: the workers trial serves batches of the program's iterator."""

    @property
    def step(self) -> StepState:
        """The step in progress: which loader's iterator fed it (`loader`)."""

    def begin(self, phase: str) -> None: ...
    def end(self) -> None: ...
    def interval(self, phase: str, start_ns: int, end_ns: int) -> None: ...
    def data_wait_begins(self) -> None: ...
    def note_batch(self, batch: Any) -> None: ...
    def forward_begins(self) -> None: ...
    def forward_ended(self, module: Any, start_ns: int, end_ns: int) -> None: ...
    def optimizer_begins(self) -> None: ...
    def optimizer_paused(self, t_ns: int) -> None: ...
    def optimizer_resumed(self, t_ns: int) -> None: ...
    def optimizer_ended(self, opt_id: int, end_ns: int) -> None: ...
    def record_fetch(self, record: dict[str, Any]) -> None: ...
    def record_loader(self, record: dict[str, Any]) -> None: ...


def timed(
    agent: HookedAgent, phase: str, fn: Callable[..., Any], when: Callable[..., bool] | None = None
) -> Callable[..., Any]:
    """Wrap `fn` so each call on the training thread records a `phase` interval (only when `when` holds)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid:
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


def install_hooks(agent: HookedAgent, torch: Any) -> None:
    """DataLoader iteration and fetches, top-level module calls, optimizer steps and torch.save."""
    _wrap_loader(agent)
    _wrap_fetchers(agent, torch)
    _wrap_module_call(agent, torch)
    PATCHES.set(torch, "save", timed(agent, "checkpoint_io", torch.save))
    _register_optimizer_hooks(agent)


def _wrap_loader(agent: HookedAgent) -> None:
    """DataLoader: time blocked in `__next__`, record the settings of every iterator."""
    from torch.utils.data import dataloader as dl_mod

    it_cls = dl_mod._BaseDataLoaderIter
    orig_next = it_cls.__next__
    orig_it_init, orig_loader_init = it_cls.__init__, dl_mod.DataLoader.__init__
    serials = itertools.count()

    @functools.wraps(orig_loader_init)  # (its signature stays readable: Lightning re-creates loaders from it)
    def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
        self._pinchpoint_site = _caller_site()  # (where the program built it: a finding names it)
        orig_loader_init(self, *args, **kwargs)

    @functools.wraps(orig_it_init)
    def it_init(self: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
        orig_it_init(self, loader, *args, **kwargs)
        self._pinchpoint_serial = next(serials)
        self._pinchpoint_site = getattr(loader, "_pinchpoint_site", None)

    def next_wrapper(self: Any) -> Any:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid or loader_probe.ACTIVE:
            return orig_next(self)  # (the loader probe's batches are pinchpoint's, not the program's)
        agent.data_wait_begins()  # (before the clock: an annotation's task opens before its interval)
        agent.step.loader = getattr(self, "_pinchpoint_serial", None)
        t0 = _now()
        try:
            batch = agent.trials.next_batch(self, orig_next)
            if getattr(self, "_num_workers", 0) > 0:
                # Batches come from worker processes: the loader probe prices that transfer too.
                agent.note_batch(batch)
            return batch
        finally:
            agent.interval("data_wait", t0, _now())
            agent.end()
            if not getattr(self, "_pinchpoint_seen", False):
                self._pinchpoint_seen = True
                _record_loader(agent, self)

    PATCHES.set(it_cls, "__next__", next_wrapper)
    PATCHES.set(it_cls, "__init__", it_init)
    PATCHES.set(dl_mod.DataLoader, "__init__", loader_init)


def _caller_site() -> str | None:
    """file:line in the program's own code that built a DataLoader: the first frame outside installed
    packages (a Trainer's or accelerate's wrapper builds it for `trainer.train()`), else the first
    outside torch's data package and pinchpoint."""
    f: FrameType | None = sys._getframe(2)
    fallback = None
    while f is not None:
        name = f.f_code.co_filename
        ours = _DATA_PKG in name or _CAPTURE_PKG in name
        if not ours and fallback is None:
            fallback = f"{name}:{f.f_lineno}"
        if not ours and not any(p in name for p in _INSTALLED) and not name.startswith("<"):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return fallback


_DATA_PKG = os.sep.join(("", "torch", "utils", "data", ""))
_CAPTURE_PKG = os.sep.join(("", "pinchpoint", "capture", ""))
_INSTALLED = ("site-packages", "dist-packages", os.sep + "lib" + os.sep + "python3")


def _wrap_fetchers(agent: HookedAgent, torch: Any) -> None:
    """Dataset fetchers: wall, on-CPU and run-queue time of each batch, in whichever process loads."""
    from torch.utils.data._utils import fetch as fetch_mod

    for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        cls = getattr(fetch_mod, name, None)
        if cls is not None:
            PATCHES.set(cls, "fetch", _fetch_wrapper(agent, torch, cls.fetch))


def _wrap_module_call(agent: HookedAgent, torch: Any) -> None:
    """Top-level module calls: forward, and (the agent decides) inference and evaluation step ends."""
    module_cls = torch.nn.Module
    orig_call = module_cls.__call__
    served = os.environ.get(SERVED_ENV) == "1"  # `run --load`: the program is a server
    probe = BatchProbe(lambda: agent.rank_dir, lambda on: setattr(agent, "in_module", on)) if served else None
    others = ServedCalls(lambda: agent.rank_dir) if served else None
    context = ContextProbe(lambda: agent.rank_dir, lambda on: setattr(agent, "in_module", on))

    def call_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() != agent.tid:
            if others is None or agent.role is not Role.MAIN or torch.is_grad_enabled():
                return orig_call(self, *args, **kwargs)
            if probe is not None and probe.kept is None and args:
                probe.note(self, args, kwargs, torch)
            return others.call(orig_call, self, args, kwargs)  # (a server's thread pool)
        if agent.in_module or agent.role is not Role.MAIN:
            return orig_call(self, *args, **kwargs)
        agent.forward_begins()
        if args:
            agent.step.tokens, agent.step.tail = tokens, tail = _tokens(args[0], torch)
            agent.step.rows = rows_of(args[0])
            if tail is not None and tokens is not None and context.kept is None:
                context.note(self, args, kwargs, tokens, tail, torch)  # (a generation loop's KV-cache price)
            if probe is not None and probe.kept is None and not torch.is_grad_enabled():
                probe.note(self, args, kwargs, torch)  # (`run --load`: a served model's batch costs)
        t0 = _now()
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            agent.forward_ended(self, t0, _now())

    PATCHES.set(module_cls, "__call__", call_wrapper)
    graph_watch.skip_in_dynamo(PATCHES, call_wrapper.__code__)


def _tokens(x: Any, torch: Any) -> tuple[int | None, tuple[int, int] | None]:
    """The sequence length of a batch of token ids (an integer tensor, batch × tokens), and its first row's
    last two ids where that costs no device sync (a CPU tensor, gradients off: a generation loop, not
    training): a loop that recomputes its context takes the previous call's ids plus one each call, so its
    call's next-to-last id is the previous call's last. (None, None) for anything else."""
    try:
        if x.dim() != 2 or x.is_floating_point() or x.is_complex():
            return None, None
        n = int(x.shape[1])
        if n < 2 or x.device.type != "cpu" or torch.is_grad_enabled():
            return n, None
        a, b = x[0, -2:].tolist()
        return n, (int(a), int(b))
    except Exception:  # (not a tensor, or a tensor subclass that refuses)
        return None, None


def _register_optimizer_hooks(agent: HookedAgent) -> None:
    """Global optimizer step hooks: the optimizer phase, and (the agent decides) training step ends."""
    from torch.optim import optimizer as opt_mod

    def pre_hook(opt: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid:
            return None
        agent.optimizer_begins()
        return _with_timed_closure(agent, args, kwargs)

    def post_hook(opt: Any, args: Any, kwargs: Any) -> None:
        if agent.role is not Role.MAIN or threading.get_ident() != agent.tid:
            return
        agent.optimizer_ended(id(opt), _now())

    PATCHES.handle(opt_mod.register_optimizer_step_pre_hook(pre_hook))
    PATCHES.handle(opt_mod.register_optimizer_step_post_hook(post_hook))


def _with_timed_closure(agent: HookedAgent, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
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


def _timed_closure(agent: HookedAgent, closure: Callable[..., Any]) -> Callable[..., Any]:
    def timed_closure(*a: Any, **kw: Any) -> Any:
        agent.optimizer_paused(_now())
        try:
            return closure(*a, **kw)
        finally:
            agent.optimizer_resumed(_now())

    return timed_closure


def _fetch_wrapper(agent: HookedAgent, torch: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, possibly_batched_index: Any) -> Any:
        if loader_probe.ACTIVE:  # (also in the probe's forked worker: it inherits the flag)
            return fn(self, possibly_batched_index)
        s0 = thread_schedstat()
        c0 = _thread_cpu()
        t0 = _now()
        try:
            batch = fn(self, possibly_batched_index)
            if agent.role is Role.MAIN:
                # The batch's shapes, once: the loader probe passes one like it through a worker.
                agent.note_batch(batch)
            return batch
        finally:
            t1 = _now()
            c1 = _thread_cpu()
            s1 = thread_schedstat()
            runq = s1[1] - s0[1] if (s0 is not None and s1 is not None) else None
            if agent.role is Role.MAIN:
                agent.trials.note_fetch(t1 - t0, c1 - c0)
            agent.record_fetch(
                {
                    "start_ns": t0,
                    "end_ns": t1,
                    "cpu_ns": c1 - c0,
                    "runq_ns": runq,
                    "worker_id": _worker_id(torch),
                }
            )

    return wrapper


def _worker_id(torch: Any) -> int | None:
    with contextlib.suppress(Exception):
        info = torch.utils.data.get_worker_info()
        if info is not None:
            return int(info.id)
    return None


def _record_loader(agent: HookedAgent, it: Any) -> None:
    with contextlib.suppress(Exception):
        sampler = getattr(it, "_index_sampler", None)
        workers = getattr(it, "_workers", None) or []
        agent.record_loader(
            {
                "t_ns": _now(),
                "num_workers": int(getattr(it, "_num_workers", 0)),
                "pin_memory": bool(getattr(it, "_pin_memory", False)),
                "prefetch_factor": getattr(it, "_prefetch_factor", None),
                "persistent_workers": bool(getattr(it, "_persistent_workers", False)),
                "batch_size": getattr(sampler, "batch_size", None),
                "dataset": type(getattr(it, "_dataset", None)).__name__,
                "worker_pids": [int(w.pid) for w in workers if getattr(w, "pid", None)],
                "serial": getattr(it, "_pinchpoint_serial", None),
                "site": getattr(it, "_pinchpoint_site", None),
            }
        )
