"""`pinchpoint try`'s fixes inside the program, without changing its code: what `$PINCHPOINT_TRY` asks
(JSON: `SPEC_KEYS`), applied when torch is attached; `pipeline/fixes.py` says which fix asks what.

- `threads`: intra-op threads for the whole run. `torch.set_num_threads` is held to it, so a program
  that sets its own count (the setting being tried) keeps the tried one.
- `loader`: DataLoader keyword arguments (`num_workers`, `persistent_workers`, `prefetch_factor`,
  `pin_memory`) given to every DataLoader the program builds, over its own.
- `malloc`: glibc's `mmap_threshold` and `trim_threshold` set again (mallopt) after the first step.
- `checkpoint_every`: `torch.save` writes only every N-th call (the first included); the others return
  without writing, for the trial run only (its skipped checkpoints are not on disk).
- `compile`: each module the program calls at top level (outside another module) that has parameters
  runs through `torch.compile(module)` (default mode), compiled at its first call: the model, not its
  loss. Compiling happens in the first steps, which statistics leave out; a program that cannot be
  compiled fails, and `try` reports that run's exit.
- `dynamic`: `true` makes `torch.compile(..., dynamic=False)` compile with dynamic=None (the default:
  a size seen to change compiles one graph dynamic in it), wherever the program calls it.
- `autocast`: `"off"` makes every `torch.autocast` region (and `torch.cpu.amp` / `torch.cuda.amp`'s, which
  are built on it) run with `enabled=False`; `"bfloat16"` runs each top-level module with parameters
  (as `compile` picks them) under `torch.autocast(its device, torch.bfloat16)`, its floating outputs cast
  back to float32 so the loss is computed as before (mixed precision: fp32 weights and optimizer).
- `fused_optimizer`: Adam, AdamW, SGD and Adagrad built with `fused=True` when the program passes
  neither `fused` nor `foreach` (`foreach=True` where fused refuses the parameters).
- `no_sync`: N micro-batches: a DistributedDataParallel module's forwards run under `no_sync()` but
  every N-th since the last optimizer step, so a loop that accumulates gradients over N micro-batches
  all-reduces once (the finding says when the loop already accumulates; else the fix needs code).
- `gc`: `{"collect": "young"}` makes each `gc.collect()` the program calls collect the youngest
  generation only; `{"freeze": true}` calls `gc.freeze()` at the end of the first step (what start-up
  built is left out of later collections).
- `fsdp_reshard`: `false` keeps each FSDP2 module's parameters gathered from forward to backward
  (`set_reshard_after_forward(False)` on each, once step 1 has run: the modules exist then).
- `pipeline_microbatches`: N: every `torch.distributed.pipelining` schedule is built with
  `n_microbatches=N` (its constructor's argument rebound; each step splits the same batch finer).
- `tf32`: `torch.backends.cuda.matmul.allow_tf32` and `cudnn.allow_tf32` set at start-up (CUDA only;
  on a CPU they change nothing).
- `stop_after`: end the program cleanly (`SystemExit(0)` at a step boundary, so its `finally` blocks
  and atexit handlers run and the run directory is complete) once that many steady steps were
  measured: steps after warm-up, outside the op window and the trials.

The environment-only fixes (glibc's allocator thresholds, `OMP_NUM_THREADS`) need nothing here: the
launcher sets them (`pipeline/try_fix.py`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import inspect
import json
import os
from collections.abc import Callable
from typing import Any

TRY_ENV = "PINCHPOINT_TRY"
SPEC_KEYS = (
    "threads", "loader", "malloc", "checkpoint_every", "compile", "dynamic", "autocast", "fused_optimizer",
    "tf32", "no_sync", "gc", "fsdp_reshard", "pipeline_microbatches", "stop_after",
)  # fmt: skip
WARMUP_STEPS = 2
"""As `analysis/steps.WARMUP_STEPS`: the leading steps statistics leave out."""
PREFETCH_DEFAULT = 2
"""torch's DataLoader prefetch_factor where workers are set and it is not."""
LOADER_KEYS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory")


class StopTrial(SystemExit):
    """The program ran the steps a `pinchpoint try` run measures: it ends here, with exit code 0."""

    def __init__(self) -> None:
        super().__init__(0)


def requested() -> dict[str, Any]:
    """What `$PINCHPOINT_TRY` asks ({} without it, or when it does not parse)."""
    text = os.environ.get(TRY_ENV)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Applier:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        stop = spec.get("stop_after")
        self.stop_after = stop if isinstance(stop, int) and stop > 0 else None
        self.measured = 0
        self.drain: int | None = None
        """Steps left that consume what the first loader with workers prefetched (`loader_seen`)."""

    def apply(self, torch: Any) -> None:
        threads = self.spec.get("threads")
        if isinstance(threads, int) and threads > 0:
            _hold_threads(torch, threads)
        loader = self.spec.get("loader")
        if isinstance(loader, dict):
            _loader_defaults(torch, {k: v for k, v in loader.items() if k in LOADER_KEYS})
        if self.spec.get("compile") is True:
            _compile_top_level(torch)
        if self.spec.get("dynamic") is True:
            _not_static(torch)
        every = self.spec.get("checkpoint_every")
        if isinstance(every, int) and every > 1:
            _save_every(torch, every)
        autocast = self.spec.get("autocast")
        if autocast == "off":
            _autocast_off(torch)
        elif autocast == "bfloat16":
            _autocast_top_level(torch)
        if self.spec.get("fused_optimizer") is True:
            _fused_optimizers(torch)
        if self.spec.get("tf32") is True:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        micro = self.spec.get("no_sync")
        if isinstance(micro, int) and micro >= 2:
            _no_sync_accumulation(torch, micro)
        collector = self.spec.get("gc")
        if isinstance(collector, dict) and collector.get("collect") == "young":
            _young_collections()
        pieces = self.spec.get("pipeline_microbatches")
        if isinstance(pieces, int) and pieces >= 2:
            _microbatches(pieces)

    def sharded(self, modules: list[Any]) -> None:
        """FSDP2's modules, found after step 1 (`dist_hooks.note_fsdp`): `fsdp_reshard` false keeps each
        one's parameters gathered from forward to backward from the next step on."""
        if self.spec.get("fsdp_reshard") is not False:
            return
        for module in modules:
            with contextlib.suppress(Exception):
                module.set_reshard_after_forward(False, recurse=False)

    def loader_seen(self, record: dict[str, Any]) -> None:
        """A DataLoader iterator gave its first batch. The first one with workers had `num_workers` ×
        `prefetch_factor` batches in flight before the steps asked for them: that many steps drain
        them and are not measured (a loader fix's 28 steps read ×29 against ×8.4 over the whole run,
        8 workers × 4 prefetched having loaded 32 batches while the program started)."""
        workers = record.get("num_workers")
        if self.drain is not None or not isinstance(workers, int) or workers <= 0:
            return
        prefetch = record.get("prefetch_factor")
        self.drain = workers * (prefetch if isinstance(prefetch, int) and prefetch > 0 else PREFETCH_DEFAULT)

    def settling(self, record: dict[str, Any]) -> bool:
        """The step drains prefetched batches (counted down from the step the first batch came in)."""
        if not self.drain or record.get("kind") != "train":
            return False
        self.drain -= 1
        return True

    def step_written(self, index: int, steady: bool) -> None:
        """After step `index`'s line is written; `steady`: statistics will use it. Raises `StopTrial`
        once `stop_after` such steps were written."""
        if index == 0:
            self._first_step()
            collector = self.spec.get("gc")
            if isinstance(collector, dict) and collector.get("freeze") is True:
                gc.freeze()
        if self.stop_after is None or not steady or index < WARMUP_STEPS:
            return
        self.measured += 1
        if self.measured >= self.stop_after:
            raise StopTrial()

    def _first_step(self) -> None:
        """glibc's thresholds again after the first step: the environment set them at start-up, but a
        program that calls mallopt itself (as allocator_churn.py pins its mmap threshold) has reset
        them since; the trial's setting holds from here (warm-up steps are not measured)."""
        malloc = self.spec.get("malloc")
        if not isinstance(malloc, dict):
            return
        from pinchpoint.capture.alloc_trial import Glibc

        mmap, trim = malloc.get("mmap_threshold"), malloc.get("trim_threshold")
        glibc = Glibc.load()
        if glibc is not None and isinstance(mmap, int) and isinstance(trim, int):
            glibc.set(mmap, trim)


def _young_collections() -> None:
    """Each `gc.collect()` the program calls collects the youngest generation only."""
    original = gc.collect

    @functools.wraps(original)
    def collect(generation: int = 2) -> int:
        return int(original(0))

    gc.collect = collect


def _hold_threads(torch: Any, threads: int) -> None:
    original = torch.set_num_threads
    original(threads)

    @functools.wraps(original)
    def set_num_threads(n: int) -> None:
        original(threads)

    torch.set_num_threads = set_num_threads


def _top_level(torch: Any, wrap: Any) -> None:
    """Each module with parameters called at top level (outside another module, on the main thread,
    not while compiling) runs as `wrap(module)` instead; built once per module, at its first call."""
    import threading
    import weakref

    module_cls = torch.nn.Module
    original = module_cls.__call__
    wrapped: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    inside = [False]
    main = threading.get_ident()

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or inside[0] or threading.get_ident() != main:
            return original(self, *args, **kwargs)
        fn = wrapped.get(self)
        if fn is None:
            if next(self.parameters(), None) is None:
                return original(self, *args, **kwargs)  # a loss or a container of functions
            fn = wrapped[self] = wrap(self)
        inside[0] = True
        try:
            return fn(*args, **kwargs)
        finally:
            inside[0] = False

    module_cls.__call__ = call


def _not_static(torch: Any) -> None:
    """`torch.compile(..., dynamic=False)` compiles with dynamic=None (its decorator form too)."""
    original = torch.compile

    @functools.wraps(original)
    def compile_(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("dynamic") is False:
            kwargs["dynamic"] = None
        return original(*args, **kwargs)

    torch.compile = compile_


def _compile_top_level(torch: Any) -> None:
    """Outside the agent's own module hook: the compiled module is what the hook times."""
    _top_level(torch, torch.compile)


def _autocast_top_level(torch: Any) -> None:
    """bf16 autocast around each top-level module's forward, its floating outputs back in float32."""

    def to_fp32(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
            return value.float()
        if isinstance(value, tuple | list):
            return type(value)(to_fp32(v) for v in value)
        if isinstance(value, dict):
            return {k: to_fp32(v) for k, v in value.items()}
        return value

    def wrap(module: Any) -> Any:
        device = next(module.parameters()).device.type

        def forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device, dtype=torch.bfloat16):
                out = module(*args, **kwargs)
            return to_fp32(out)

        return forward

    _top_level(torch, wrap)


def _autocast_off(torch: Any) -> None:
    cls = torch.amp.autocast_mode.autocast
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > 2:  # (device_type, dtype, enabled, ...): enabled given by position
            args = (*args[:2], False, *args[3:])
        else:
            kwargs["enabled"] = False
        original(self, *args, **kwargs)

    cls.__init__ = __init__


FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")


def _fused_optimizers(torch: Any) -> None:
    for name in FUSED_OPTIMIZERS:
        cls = getattr(torch.optim, name, None)
        if cls is not None:
            _fused(cls)


def _fused(cls: Any) -> None:
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if "fused" in kwargs or "foreach" in kwargs:
            original(self, *args, **kwargs)  # the program chose its implementation
            return
        params = list(args[0]) if args else list(kwargs.pop("params", ()))
        rest = args[1:]
        try:
            original(self, params, *rest, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError):
            original(self, params, *rest, foreach=True, **kwargs)

    cls.__init__ = __init__


def _no_sync_accumulation(torch: Any, micro_batches: int) -> Any:
    """DDP forwards under no_sync() but every `micro_batches`-th since the last optimizer step: the
    backward of a forward run under no_sync() accumulates locally, and the last one all-reduces."""
    ddp = torch.nn.parallel.DistributedDataParallel
    original = ddp.forward
    since_step = [0]

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        since_step[0] += 1
        if since_step[0] % micro_batches == 0 or not torch.is_grad_enabled():
            return original(self, *args, **kwargs)
        with self.no_sync():
            return original(self, *args, **kwargs)

    def stepped(*_: Any) -> None:
        since_step[0] = 0

    handle = importlib.import_module("torch.optim.optimizer").register_optimizer_step_post_hook(stepped)
    ddp.forward = forward
    return handle


def _save_every(torch: Any, every: int) -> None:
    """Outside the agent's own torch.save hook: a skipped call is no checkpoint time."""
    original = torch.save
    calls = [0]

    @functools.wraps(original)
    def save(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if (calls[0] - 1) % every == 0:
            original(*args, **kwargs)

    torch.save = save


def _microbatches(n: int) -> None:
    """Every pipelining schedule's constructor called with `n_microbatches=n`."""

    def adjust(arguments: dict[str, Any]) -> None:
        arguments["n_microbatches"] = n

    with contextlib.suppress(Exception):
        schedules = importlib.import_module("torch.distributed.pipelining.schedules")
        for name in ("PipelineScheduleSingle", "PipelineScheduleMulti"):
            cls = getattr(schedules, name)
            cls.__init__ = _rebound(cls.__init__, adjust)


def _rebound(original: Any, adjust: Callable[[dict[str, Any]], None]) -> Any:
    """`original` with its arguments, however the caller passed them, changed by `adjust` (a dict of
    name -> value it may change, add to or remove from)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kw)
        except TypeError:
            original(self, *args, **kw)  # the program's own error, as it would be
            return
        adjust(bound.arguments)
        original(*bound.args, **bound.kwargs)

    return __init__


def _loader_defaults(torch: Any, kwargs: dict[str, Any]) -> None:
    if not kwargs:
        return

    def adjust(given: dict[str, Any]) -> None:
        given.update(kwargs)
        if not given.get("num_workers"):
            # prefetch_factor and persistent_workers are errors without workers
            given.pop("prefetch_factor", None)
            given["persistent_workers"] = False

    cls = torch.utils.data.DataLoader
    cls.__init__ = _rebound(cls.__init__, adjust)
