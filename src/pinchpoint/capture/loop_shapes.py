"""Step boundaries for loops that are not `for batch: forward; backward; optimizer.step()`.

- No optimizer (manual updates such as `p.data.add_(p.grad, alpha=-lr)`): after a backward, the next
  data fetch or top-level model call is a candidate step end. Candidates are held until
  `MANUAL_AFTER_CYCLES` cycles have passed with no optimizer step, then written; an optimizer step
  discards them (they were micro-batches of a gradient-accumulation step).
- A manual update has no call to hook: between a backward and the step's end a torch-function mode
  (`UpdateWatch`) notes the last op that touches a trained parameter, and the update ends there; the
  loop's own work after it (building the next batch) is the loop's, not the update's.
- Evaluation inside training: a top-level eval-mode call of the trained model under no_grad ends an
  `eval` step of its own (`Agent.forward_ended`).

One object decides: the agent's `StepDetector` holds the loop's state (`LoopState`, its `LoopMode`)
and ends steps through the agent (`StepSink`); the hooks report events to it through the agent.
"""

from __future__ import annotations

import functools
import time
import weakref
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from pinchpoint.capture.roles import Role
from pinchpoint.capture.step_state import Counters, StepState

_now = time.monotonic_ns
"""The agent's clock (`capture/agent.py`): step and interval times are on it."""

MANUAL_AFTER_CYCLES = 8
"""Forward/backward cycles with no optimizer step: then the program updates its parameters itself
(`p.data.add_(p.grad, alpha=-lr)`) and each cycle is a step. Fewer would split the first optimizer
step of a gradient-accumulation loop into its micro-batches; 8 is a long accumulation on a CPU."""


ATTRIBUTE_ACCESS = frozenset({"__get__", "__set__", "__delete__"})


class LoopMode(StrEnum):
    """What kind of loop the program runs, as far as the agent can tell so far."""

    UNKNOWN = "unknown"
    TRAIN = "train"
    """Optimizer steps end the steps."""
    MANUAL = "manual"
    """Trains without an optimizer (a hand-written update): a cycle after a backward is a step."""
    INFERENCE = "inference"
    """Top-level model calls without gradients end the steps."""
    EXPLICIT = "explicit"
    """The program (`prof.step()`) or a framework callback marks the steps."""


@dataclass(slots=True)
class LoopState:
    """Step detection's state, in one place: its `StepDetector` owns it (the agent reads it as
    `agent.shape`)."""

    mode: LoopMode = LoopMode.UNKNOWN
    calls_without_backward: dict[int, int] = field(default_factory=dict)
    """Top-level calls per module with grad enabled since the last backward (inference after a few)."""
    lead_optimizer: int | None = None
    """The optimizer whose step ends a training step: the last of the first iteration's cycle."""
    opt_cycle: list[int] = field(default_factory=list)
    """The first iteration's optimizers, until one steps again."""
    in_optimizer: bool = False
    """Inside an optimizer's step (its closure's backwards are that step's, not manual updates)."""
    trained_modules: set[int] = field(default_factory=set)
    """Modules called in train mode with grad: their no-grad eval-mode calls are steps of their own."""
    trained_refs: list[Any] = field(default_factory=list)
    """Weak references to those modules (`note_trained`)."""
    update_watch: Any = None
    """The torch-function mode noting a manual update's ops (`start_update_watch`)."""
    await_boundary: bool = False
    """A backward ended and no optimizer has ever stepped: the next data fetch or top-level call may
    start a new step (a manual update loop)."""
    last_backward_end_ns: int = 0
    pending: list[tuple[int, Counters, list[Any] | None]] = field(default_factory=list)
    """Candidate step ends of a loop not yet known to update its parameters by hand: (time, counters
    then, the update interval since the last backward)."""
    explicit_kind: str = "explicit"
    """What the marked steps are (`Agent.explicit_step`): the last partial step is one too."""


INFERENCE_AFTER_CALLS = 3
"""Top-level calls of one module with grad enabled and no backward in between: then it is inference."""


class StepSink(Protocol):
    """What step detection needs from the agent (`agent.Agent`): the step in progress and a way to
    end it."""

    intervals: list[list[Any]]
    """The step in progress's phase intervals: [phase, start_ns, end_ns]."""
    window: Any
    """The op window (`opwindow.OpWindow`), re-armed when a loop turns out to train."""

    @property
    def role(self) -> Role: ...
    @property
    def step(self) -> StepState: ...
    def counters(self) -> Counters: ...
    def end_step(
        self, kind: str, end_ns: int | None = None, partial: bool = False, counters: Counters | None = None
    ) -> None: ...


def _param_ptrs(refs: list[Any]) -> set[int]:
    ptrs: set[int] = set()
    for ref in refs:
        module = ref()
        if module is not None:
            ptrs.update(p.data_ptr() for p in module.parameters())
    return ptrs


def _touches(value: Any, ptrs: set[int], depth: int = 0) -> bool:
    if isinstance(value, (list, tuple)) and depth == 0:
        return any(_touches(v, ptrs, 1) for v in value)
    data_ptr = getattr(value, "data_ptr", None)
    if data_ptr is None or not callable(data_ptr):
        return False
    try:
        return bool(data_ptr() in ptrs)
    except RuntimeError:  # (a tensor without storage)
        return False


@functools.cache
def _watch_class(torch: Any) -> Any:
    """The torch-function mode that notes when the last op on a trained parameter ended (built once)."""

    class UpdateWatch(torch.overrides.TorchFunctionMode):  # type: ignore[misc]
        def __init__(self, ptrs: set[int]) -> None:
            super().__init__()
            self.ptrs, self.last_ns = ptrs, 0

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            # (attribute access is not the update: zero_grad sets `p.grad = None` before the next forward)
            if getattr(func, "__name__", "") not in ATTRIBUTE_ACCESS and any(
                _touches(a, self.ptrs) for a in args
            ):
                self.last_ns = _now()
            return out

    return UpdateWatch


REARM_AFTER = 3
"""Steps after the first update at which a window re-armed for the training steps opens (past the
first updates' warm-up)."""


class StepDetector:
    """Decides where the steps of a loop end (the loop's shape: `LoopState`), from the events the
    agent's hooks report; it ends them through its sink, the agent."""

    def __init__(self, sink: StepSink) -> None:
        self.sink = sink
        self.state = LoopState()

    def note_trained(self, module: Any) -> None:
        """`module` was called with grad enabled in train mode: its parameters are what an update touches."""
        key = id(module)
        if key not in self.state.trained_modules:
            self.state.trained_modules.add(key)
            self.state.trained_refs.append(weakref.ref(module))

    def call_ended(self, module: Any, end_ns: int, torch: Any) -> None:
        """A top-level call of `module` returned: it may end an inference step, or an evaluation step
        inside training; in a loop of unknown kind it may show which kind the loop is."""
        state = self.state
        if state.mode is LoopMode.INFERENCE:
            self.sink.end_step("inference", end_ns)
        elif state.mode in (LoopMode.TRAIN, LoopMode.MANUAL):
            if torch.is_grad_enabled():
                if module.training:
                    self.note_trained(module)
            elif (
                not module.training
                and id(module) in state.trained_modules
                and not any(iv[0] == "backward" for iv in self.sink.intervals)
            ):
                self.eval_step(end_ns)  # evaluation inside training: a step of its own kind
        elif state.mode is LoopMode.UNKNOWN:
            self._first_calls(module, end_ns, torch)

    def _first_calls(self, module: Any, end_ns: int, torch: Any) -> None:
        """Before the loop's kind is known: a call under no_grad, or `INFERENCE_AFTER_CALLS` of one
        module with no backward, is inference."""
        if module.training:
            self.note_trained(module)
        if torch.is_grad_enabled():
            key = id(module)
            n = self.state.calls_without_backward[key] = self.state.calls_without_backward.get(key, 0) + 1
            if n < INFERENCE_AFTER_CALLS:
                return
        self.state.mode = LoopMode.INFERENCE
        self.sink.end_step("inference", end_ns)

    def start_update_watch(self, torch: Any) -> None:
        """After a backward with no optimizer ever stepped: note the ops that touch trained parameters
        until the step's boundary (`boundary`)."""
        if self.state.update_watch is not None or not self.state.trained_refs:
            return
        ptrs = _param_ptrs(self.state.trained_refs)
        if not ptrs:
            return
        watch = _watch_class(torch)(ptrs)
        try:
            watch.__enter__()
        except Exception:  # (a torch without modes: the update runs to the boundary)
            return
        self.state.update_watch = watch

    def _stop_update_watch(self) -> int:
        """End the watch; the time the last op on a trained parameter ended (0 if none did)."""
        watch, self.state.update_watch = self.state.update_watch, None
        if watch is None:
            return 0
        try:
            watch.__exit__(None, None, None)
        except Exception:  # (the program left its own mode open above ours)
            return 0
        return int(watch.last_ns)

    def boundary(self, t_ns: int) -> None:
        """A data fetch or top-level call starts at `t_ns` after a backward, with no optimizer step
        ever: in a manual-update loop this is where the step ends; the update (`optimizer`) runs from
        the backward to the last op on a trained parameter (to `t_ns` when none was seen)."""
        self.state.await_boundary = False
        last = self._stop_update_watch()
        if self.state.lead_optimizer is not None or self.sink.role is not Role.MAIN:
            return
        end = last if self.state.last_backward_end_ns < last <= t_ns else t_ns
        update = (
            ["optimizer", self.state.last_backward_end_ns, end]
            if end > self.state.last_backward_end_ns
            else None
        )
        if self.state.mode is LoopMode.MANUAL:
            if update is not None:
                self.sink.intervals.append(update)
            self.sink.end_step("train", t_ns)
            return
        self.state.pending.append((t_ns, self.sink.counters(), update))
        if len(self.state.pending) >= MANUAL_AFTER_CYCLES:
            self.declare_manual()

    def declare_manual(self) -> None:
        """No optimizer steps here: write the candidate steps held so far, each with its update."""
        self.state.mode = LoopMode.MANUAL
        pending, self.state.pending = self.state.pending, []
        rest = self.sink.intervals
        for t_ns, counters, update in pending:
            self.sink.intervals = [iv for iv in rest if iv[1] < t_ns] + (
                [update] if update is not None else []
            )
            rest = [iv for iv in rest if iv[1] >= t_ns]
            self.sink.end_step("train", t_ns, counters=counters)
        self.sink.intervals = rest

    def optimizer_stepped_first_cycle(self, opt_id: int, t_ns: int) -> None:
        """An optimizer stepped before the loop's cycle is known. A training step ends at the *last*
        optimizer of an iteration (a GAN steps its discriminator, then its generator). The first
        optimizer ends step 0 (steps are written as they end: annotations and killed runs need that);
        each optimizer new to the cycle then leads instead, until one steps a second time. So steps 0 and
        1 are part and one-and-a-part iterations (warm-up, out of the statistics), and the count stays one
        step per iteration."""
        if self.state.lead_optimizer is None:
            self.state.lead_optimizer, self.state.opt_cycle = opt_id, [opt_id]
            self.sink.end_step("train", t_ns)
            return
        if opt_id not in self.state.opt_cycle:
            self.state.lead_optimizer = opt_id
            self.state.opt_cycle.append(opt_id)
            return
        self.state.opt_cycle = []  # one stepped again: the cycle is known
        if opt_id == self.state.lead_optimizer:
            self.sink.end_step("train", t_ns)

    def optimizer_stepped(self) -> None:
        """An optimizer step: candidate manual boundaries were micro-batches of this step."""
        self._stop_update_watch()
        self.state.pending = []
        self.state.await_boundary = False
        if self.state.mode is LoopMode.MANUAL:
            self.state.mode = LoopMode.TRAIN

    def eval_step(self, t_ns: int) -> None:
        """A top-level evaluation call of the trained model ended: what ran since the last step
        (the eval batch's fetch and forward) is an evaluation step of its own."""
        if self.state.pending:
            self.declare_manual()  # nobody evaluates in the middle of an accumulation
        self.state.await_boundary = False
        self.sink.end_step("eval", t_ns)

    def trains_now(self) -> None:
        """An optimizer stepped in a loop that so far only called its model without gradients (an RL loop's
        first rollout comes before any update): it trains. An op window that already ran over those calls
        saw rollouts, not the training step the rules judge; a new one opens over the steps ahead."""
        was, self.state.mode = self.state.mode, LoopMode.TRAIN
        window = self.sink.window
        if was is not LoopMode.INFERENCE or window.spec is None or not window.done:
            return
        from pinchpoint.capture.opwindow import OpWindow

        fresh = OpWindow(window.rank_dir, (self.sink.step.index + REARM_AFTER, window.spec[1]))
        fresh.batch_spec, fresh.autocast_bf16 = window.batch_spec, window.autocast_bf16
        self.sink.window = fresh
