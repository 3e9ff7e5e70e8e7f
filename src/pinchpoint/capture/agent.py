"""The in-process agent: finds steps and times their phases inside an unmodified PyTorch program.

Installed by the bootstrap `sitecustomize` (for `pinchpoint run`) or by `pinchpoint.profile()`. It
waits for `torch` to be imported, then wraps a handful of framework entry points:

  DataLoader iterator `__next__`    -> data_wait       dataset fetcher `fetch`  -> fetch-{pid}.jsonl
  top-level `nn.Module.__call__`    -> forward         `torch.autograd.backward/grad` -> backward
  optimizer step (global hooks)     -> optimizer       `torch.save`             -> checkpoint_io

Steps end at optimizer steps (training), at top-level model calls under no_grad (inference) or at an
explicit `step()`. One line per step is written to `steps.jsonl`, flushed at least every 20 ms, so a killed program
keeps the steps finished before that. Costs per step: a few clock reads, and for short steps a share of
one reading of the counters and of one `os.write` (`shared_counters.py`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from pinchpoint.capture import (
    appliers,
    cuda_hooks,
    dist_hooks,
    frameworks,
    hooks,
    loader_probe,
    loop_shapes,
    opwindow,
)
from pinchpoint.capture.annotate import annotator_from_environment
from pinchpoint.capture.compiles import write_compiles
from pinchpoint.capture.envnames import OPWINDOW_ENV
from pinchpoint.capture.gc_watch import WATCH as GC
from pinchpoint.capture.graph_watch import WATCH as GRAPHS
from pinchpoint.capture.live_tensors import LeakWatch
from pinchpoint.capture.loop_shapes import LoopMode
from pinchpoint.capture.loop_site import loop_site
from pinchpoint.capture.on_demand import OnDemand
from pinchpoint.capture.patches import PATCHES
from pinchpoint.capture.procfs import forget_thread_files
from pinchpoint.capture.roles import QUIET, Role
from pinchpoint.capture.shared_counters import SharedCounters
from pinchpoint.capture.step_state import Counters, DeviceMarks, StepState, read_counters
from pinchpoint.capture.trials import Trials, trials_enabled
from pinchpoint.capture.writer import JsonlWriter, write_json_atomic

_now = time.monotonic_ns

FSDP_NOTED_AT = 2
"""The step index after which FSDP2's settings are read from the modules (`dist_hooks.note_fsdp`)."""


class Agent:
    """Per-process capture state. One instance per process (`AGENT`); forked children reset it.

    The hooks (`capture/hooks.py`) report calls through "what the hooks report"; the agent decides
    where steps end through its `detector` (`loop_shapes.StepDetector`; its state is `shape`)."""

    def __init__(self, run_dir: Path, rank: int, window: tuple[int, int] | None) -> None:
        self.run_dir = run_dir
        self.rank = rank
        self.rank_dir = run_dir / "ranks" / f"rank{rank}"
        self.role: Role = Role.MAIN
        self.torch: Any = None
        self.tid = threading.get_ident()
        self.detector = loop_shapes.StepDetector(self)
        self.shape = self.detector.state
        """Step detection's state: the loop's kind (`LoopMode`), its optimizers, a manual update's watch."""
        self.step = StepState(read_counters(self.tid))
        self.intervals: list[list[Any]] = []
        """The step in progress's phase intervals: [phase, start_ns, end_ns]."""
        self.shared = SharedCounters()
        """A run of short steps' lines, held until one reading of the counters is shared among them."""
        self.in_module = False
        self.opt_start_ns = 0
        """When the optimizer's own update (re)started: its step's start, or the end of its closure."""
        self.autocast_dtype: str | None = None
        self.loop: dict[str, Any] | None = None
        """The program's loop statement around its steps (`capture/loop_site.py`), found at the first step."""
        self._loop_sought = False
        self._fsdp_noted = False
        self.framework: dict[str, Any] | None = None
        """The framework driving the loop and its settings (`capture/frameworks.py`)."""
        self.steps = JsonlWriter(self.rank_dir / "steps.jsonl")
        self.device = DeviceMarks()
        self.loaders = JsonlWriter(self.rank_dir / "loaders.jsonl")
        self.fetches = JsonlWriter(self.rank_dir / f"fetch-{os.getpid()}.jsonl")
        self.distributed = JsonlWriter(self.rank_dir / "distributed.jsonl")
        self.ddp_on_cpu = False
        """A CPU model is wrapped in DDP: backward's blocked time is its gradient all-reduce wait."""
        self.window = opwindow.OpWindow(self.rank_dir, window)
        self.on_demand = OnDemand(run_dir)  # `pinchpoint capture`: another window, later
        self.trials = Trials(self.rank_dir)
        self.leaks = LeakWatch()
        self.trials_on = trials_enabled()
        spec = appliers.requested()
        self.applier = appliers.Applier(spec) if spec else None  # `pinchpoint try`'s fix and budget
        self.closed = False
        self.annot: Any = None  # an `annotate.Annotator` (`--annotate nvtx|itt`): phases as ranges
        self.attached = False  # started by `pinchpoint attach` (`capture/attached.py`), which detaches it
        self.detach_at_safe_point: Callable[[Agent], bool] | None = None
        """Set by `capture/attached.py` when the attacher asks to detach: called at the next safe point on
        the training thread (a batch asked for, a forward begun), True once detached."""

    def attach(self, torch: Any) -> None:
        """Called once `torch` is importable: wrap its entry points and write process-{pid}.json."""
        self.torch = torch
        GC.install(PATCHES)
        GRAPHS.install(PATCHES)
        hooks.install_hooks(self, torch)
        for name in ("backward", "grad"):
            wrapped = dist_hooks.blocked_backward(self, getattr(torch.autograd, name))
            PATCHES.set(torch.autograd, name, wrapped)
        cuda_hooks.install(self, torch)
        if self.applier is not None:
            with contextlib.suppress(Exception):
                self.applier.apply(torch)
        dist_hooks.install(self, torch)
        self.annot = annotator_from_environment(self.run_dir, torch)
        self.write_process_info()
        os.register_at_fork(after_in_child=self._after_fork)
        atexit.register(self.close)

    def begin(self, phase: str) -> None:
        """A phase starts now on the training thread (only with `--annotate`)."""
        if self.annot is not None:
            self.annot.begin(phase, self.step.index)

    def end(self) -> None:
        if self.annot is not None:
            self.annot.end()

    def _after_fork(self) -> None:
        # A forked child (usually a DataLoader worker) keeps the hooks but records only its fetches;
        # the loader probe's worker records nothing.
        if self.role in QUIET:
            return
        self.role = Role.PROBE if loader_probe.ACTIVE else Role.WORKER
        self.tid = threading.get_ident()
        forget_thread_files()
        self.shared = SharedCounters()
        self.annot = None
        for w in self._writers():
            w.forget()
        self.fetches = JsonlWriter(self.rank_dir / f"fetch-{os.getpid()}.jsonl")
        self.window.disable()
        self.closed = False

    def become_rank(self, rank: int) -> None:
        """`torch.distributed.init_process_group` returned here: this is rank `rank`'s training process.
        A torchrun rank already knew (from $RANK); a `torch.multiprocessing.spawn` child started as a
        worker in rank 0's folder and now moves to its own, with its own op window."""
        if self.role is Role.LAUNCHER or (self.role is Role.MAIN and rank == self.rank):
            return
        old_info = self.rank_dir / f"process-{os.getpid()}.json"
        self.role = Role.MAIN
        self.tid = threading.get_ident()
        if rank != self.rank:
            self.rank = rank
            self.rank_dir = self.run_dir / "ranks" / f"rank{rank}"
            for w in self._writers():
                w.move(self.rank_dir / w.path.name)
            with contextlib.suppress(OSError):
                old_info.unlink()
        if not self.window.active:
            self.window = opwindow.OpWindow(self.rank_dir, self.window.spec)
            self.trials = Trials(self.rank_dir, self.trials.deadline_wall_s)
        self.write_process_info()

    def become_launcher(self) -> None:
        """This process starts the ranks (`torch.multiprocessing.spawn`) and runs no steps itself."""
        if self.role is Role.MAIN and self.step.start_ns is None and self.step.index == 0:
            self.role = Role.LAUNCHER
            self.window.disable()
            self.write_process_info()

    def write_process_info(self) -> None:
        from pinchpoint.capture.environment import process_record

        info = process_record(
            self.torch, self.rank, self.role, self.autocast_dtype, loop=self.loop, framework=self.framework
        )
        write_json_atomic(self.rank_dir / f"process-{os.getpid()}.json", info)

    def _writers(self) -> tuple[JsonlWriter, ...]:
        return (self.steps, self.loaders, self.fetches, self.distributed)

    def close(self, keep_partial: bool = True) -> None:
        """Stop recording and flush; `keep_partial`: write the unfinished step (a crash), unless detaching."""
        if self.closed:
            return
        self.closed = True
        # A profiler left running into interpreter teardown crashes the process (SIGSEGV in Kineto):
        # stop the op window first, whatever happens next.
        with contextlib.suppress(Exception):
            self.window.stop(self.torch)
        self.trials.restore(self.torch, self.step.index)
        if self.shape.pending and self.role is Role.MAIN:
            with contextlib.suppress(Exception):
                self.detector.declare_manual()  # a short loop that never called an optimizer
        if (
            keep_partial
            and self.step.start_ns is not None
            and self.intervals
            and self.role is Role.MAIN
            and self.shape.mode is not LoopMode.UNKNOWN
        ):
            # The unfinished last step is still evidence (a crash mid-step): keep it, marked partial.
            with contextlib.suppress(Exception):
                self.partial_step()
        with contextlib.suppress(Exception):
            self._release_held()  # (no partial step ended the run of short steps)
        if self.annot is not None:
            with contextlib.suppress(Exception):
                self.annot.end_step()
        if self.role is Role.MAIN:
            rank_dir = self.rank_dir
            for write in (
                self.write_process_info,
                lambda: GC.write(rank_dir),
                lambda: write_compiles(rank_dir),
            ):
                with contextlib.suppress(Exception):
                    write()
        for w in self._writers():
            with contextlib.suppress(OSError):
                w.close()
        with contextlib.suppress(Exception):
            self.device.close()

    # ---- intervals and steps ---------------------------------------------------------------------

    def interval(
        self, phase: str, start_ns: int, end_ns: int, what: str | None = None, nbytes: int | None = None
    ) -> None:
        """A phase interval of the step in progress; a collective's carries its name and bytes."""
        if self.step.start_ns is None:
            self.step.start_ns = start_ns
        self.intervals.append(
            [phase, start_ns, end_ns] if what is None else [phase, start_ns, end_ns, what, nbytes]
        )

    def counters(self) -> Counters:
        return read_counters(self.tid)

    def end_step(
        self, kind: str, end_ns: int | None = None, partial: bool = False, counters: Counters | None = None
    ) -> None:
        if self.role in QUIET:
            return  # (a hook that was running when the agent detached)
        end = _now() if end_ns is None else end_ns
        share = counters is None and self._may_share(end, partial)
        if share:  # (a short step: its counters come with its run's, `shared_counters`)
            now = self.shared.placeholder(self.step.counters)
        else:
            now = counters if counters is not None else self.counters()
        record = self._step_record(kind, end, partial, now)
        if self.applier is not None:  # (`pinchpoint try`: steps draining what a loader prefetched)
            record["settling"] = self.applier.settling(record)
        if share:
            self.shared.hold(record, self.step.counters)
        else:
            self._write(self.shared.release(record))
        self.step.tainted = False
        if partial or record["profiled"] or record["trial"] or self.applier is not None:
            self.steps.flush()  # (what a reader may wait for: written at once)
            self.fetches.flush()
        else:  # short steps share a write (`writer.FLUSH_NS`)
            self.steps.flush_due(end)
            self.fetches.flush_due(end)  # batches fetched in this process (num_workers=0)
        if self.annot is not None:
            self.annot.end_step()
        if self.role is Role.MAIN:
            self.device.mark(self.torch, self.rank_dir, self.step.index)
        self.intervals = []
        self.step.index += 1
        if not self._loop_sought and not partial and self.role is Role.MAIN:
            self._find_loop(sys._getframe(1))
        self._start_next_step(end, now, record)
        start = self.step.start_ns
        self.step.agent_ns = max(0, _now() - start) if start is not None else 0
        if self.applier is not None and self.role is Role.MAIN and not partial:
            # (last: a `pinchpoint try` run that measured its steps ends the program from here)
            steady = not (record["profiled"] or record["trial"] or record.get("settling"))
            self.applier.step_written(record["step"], steady=steady)

    def _step_record(self, kind: str, end: int, partial: bool, now: Counters) -> dict[str, Any]:
        """The step in progress as its steps.jsonl line (docs/run-directory.md), ending at `end`."""
        profiled = self.window.active or self.step.tainted
        rss = self.shared.rss(end, fresh=partial)
        return self.step.record(kind, end, partial, now, profiled, self.intervals, rss)

    def _may_share(self, end: int, partial: bool) -> bool:
        """Whether the step ending at `end` may share its run's counters: a short one of the program's own
        (no window, trial or snapshot at its start, none still to come, not `try`)."""
        step, window = self.step, self.window
        exact = (
            partial or step.trial or step.tainted or self.role is not Role.MAIN or self.applier is not None
        )
        if exact or step.start_ns is None or window.active or not (window.spec is None or window.done):
            return False
        trials = self.trials_on and window.spec is not None and not self.trials.settled()
        return not trials and self.shared.may_hold(step.start_ns, end)

    def _write(self, lines: list[dict[str, Any]]) -> None:
        for line in lines:
            self.steps.add(line)
            self.trials.observe(line)

    def _release_held(self) -> None:
        """End a run of short steps here, before pinchpoint's own work at this boundary."""
        if self.shared.held:
            self._write(self.shared.release_now(self.counters(), _now()))

    def _find_loop(self, frame: FrameType) -> None:
        """Once, after step 0 is written: its cost (a stack walk, one parse) lands in a warm-up step."""
        self._loop_sought = True
        with contextlib.suppress(Exception):
            self.loop = loop_site(frame)
        if self.framework is None:
            with contextlib.suppress(Exception):
                self.framework = frameworks.detect(frame)
        if self.loop is not None or self.framework is not None:
            with contextlib.suppress(Exception):
                self.write_process_info()  # now, not only at exit: a killed run keeps them

    def _start_next_step(self, end: int, now: Counters, record: dict[str, Any]) -> None:
        """The next step starts where this one ended: its counters too (one reading, not two)."""
        step = self.step
        if self.trials.budget.over():  # (pinchpoint's time inside the loop is spent: the window ends here)
            self.window.shorten(step.index)
        window = self.window.on_step_end(self.torch, step.index, self.autocast_dtype == "bfloat16")
        if self.leaks.observe(self.torch, record, self.rank_dir, settle=self._release_held) or window:
            # The op window opened or closed (probes), or live tensors were counted: no step's time.
            step.tainted = True
            taken_end, end = end, _now()
            self.trials.budget.note(end - taken_end)
            now = self.counters()
        if self.role is Role.MAIN and self.window.spec is not None and self.trials_on:
            # From the first step on (not only once the window is done): the thread trial measures what
            # other processes take of the cores from there to the window's end.
            ready = self.window.done and not step.tainted
            step.trial = self.trials.on_step_end(self.torch, step.index, ready=ready)
        if self.role is Role.MAIN and not step.trial and self.window.done:
            self.window = self.on_demand.poll(end, step.index, self.window) or self.window
        step.start_ns = end
        step.counters = now

    def partial_step(self) -> None:
        """Write the step in progress (at exit); analysis treats it like the others."""
        self.window.disable()
        self.shape.pending = []  # (their intervals stay in the partial step)
        kind = {LoopMode.TRAIN: "train", LoopMode.MANUAL: "train", LoopMode.INFERENCE: "inference"}.get(
            self.shape.mode, self.shape.explicit_kind
        )
        self.end_step(kind, partial=True)

    def explicit_step(self, kind: str = "explicit") -> None:
        """A step marked by the program (`prof.step()`) or a framework callback (`kind` train or eval)."""
        self.shape.mode = LoopMode.EXPLICIT
        self.shape.pending = []
        self.shape.await_boundary = False
        if kind != "eval":
            self.shape.explicit_kind = kind
        self.end_step(kind)

    def note_autocast(self) -> None:
        torch = self.torch
        with contextlib.suppress(Exception):
            for device in ("cpu", "cuda"):
                if torch.is_autocast_enabled(device):
                    self.autocast_dtype = str(torch.get_autocast_dtype(device)).replace("torch.", "")
                    return

    # ---- what the hooks report (capture/hooks.py), on the training thread ------------------------

    def data_wait_begins(self) -> None:
        """The program asks its DataLoader for a batch: after a backward, maybe a new step."""
        if self.detach_at_safe_point is not None and self.detach_at_safe_point(self):
            return
        if self.shape.await_boundary:
            self.detector.boundary(_now())
        self.begin("data_wait")

    def note_batch(self, batch: Any) -> None:
        """A batch the program loaded: its shapes, once, for the loader probe (`loader_probe`)."""
        if self.window.batch_spec is None:
            self.window.batch_spec = loader_probe.batch_spec(batch)

    def forward_begins(self) -> None:
        """A top-level module call (the calls inside it pass through): after a backward, maybe a new step."""
        if self.detach_at_safe_point is not None and self.detach_at_safe_point(self):
            return
        self.in_module = True
        if self.autocast_dtype is None:
            self.note_autocast()
        if self.shape.await_boundary:
            self.detector.boundary(_now())
        self.begin("forward")

    def forward_ended(self, module: Any, start_ns: int, end_ns: int) -> None:
        """The top-level call of `module` returned (or raised): it may end an inference step, or an
        evaluation step inside training; in an unknown loop it may show which kind the loop is."""
        self.in_module = False
        if self.role in QUIET:
            return
        self.interval("forward", start_ns, end_ns)
        self.end()
        self.detector.call_ended(module, end_ns, self.torch)

    def optimizer_begins(self) -> None:
        self.begin("optimizer")
        self.shape.in_optimizer = True
        self.opt_start_ns = _now()

    def optimizer_paused(self, t_ns: int) -> None:
        """The optimizer calls its closure (`optimizer.step(closure)`): the update so far was its own;
        the closure's forward and backward are not."""
        if self.shape.in_optimizer:
            self.interval("optimizer", self.opt_start_ns, t_ns)

    def optimizer_resumed(self, t_ns: int) -> None:
        """The closure returned: the optimizer's own update goes on."""
        self.opt_start_ns = t_ns

    def optimizer_ended(self, opt_id: int, end_ns: int) -> None:
        """Optimizer `opt_id` finished a step: the loop trains, and the lead optimizer ends its step."""
        if self.role in QUIET:
            return
        self.shape.in_optimizer = False
        self.interval("optimizer", self.opt_start_ns or end_ns, end_ns)
        self.end()
        self.detector.optimizer_stepped()
        if self.shape.mode in (LoopMode.UNKNOWN, LoopMode.INFERENCE):
            self.detector.trains_now()
        if self.shape.mode is not LoopMode.TRAIN:
            return
        if self.shape.lead_optimizer is None or self.shape.opt_cycle:
            self.detector.optimizer_stepped_first_cycle(opt_id, end_ns)
        elif opt_id == self.shape.lead_optimizer:
            self.end_step("train", end_ns)
        if not self._fsdp_noted and self.step.index >= FSDP_NOTED_AT:  # (modules ran forward, backward)
            self._fsdp_noted = True
            dist_hooks.note_fsdp(self)

    def record_fetch(self, record: dict[str, Any]) -> None:
        """A batch fetched in this process (any process). Workers flush per batch (they can be killed
        at any time); the main process at each step's end."""
        if self.role in QUIET:
            return
        self.fetches.add(record)
        if self.role is Role.WORKER:
            self.fetches.flush()

    def record_loader(self, record: dict[str, Any]) -> None:
        """The settings of a DataLoader iterator, when it yields its first batch."""
        if self.role in QUIET:
            return
        self.loaders.add(record)
        self.loaders.flush()
        if self.applier is not None:
            self.applier.loader_seen(record)


# ---- installation ---------------------------------------------------------------------------------

AGENT: Agent | None = None


def current() -> Agent | None:
    return AGENT


def start(run_dir: Path, rank: int | None = None, window: str | None = None) -> Agent:
    """Create this process's agent and attach it to torch now or when torch is first imported. `window`:
    the op window as "START:STEPS" or "off" (default: $PINCHPOINT_OPWINDOW, else 10:3)."""
    global AGENT
    if AGENT is not None:
        return AGENT
    if rank is None:
        rank = int(os.environ.get("RANK", "0") or 0)
    spec = opwindow.parse_window(window if window is not None else os.environ.get(OPWINDOW_ENV))
    AGENT = Agent(run_dir, rank, spec)
    if hasattr(torch := sys.modules.get("torch"), "nn"):
        AGENT.attach(torch)
    else:
        from pinchpoint.capture.import_hook import TorchImportHook

        sys.meta_path.insert(0, TorchImportHook(AGENT))
    return AGENT
