"""Step boundaries for loops that are not `for batch: forward; backward; optimizer.step()`.

- No optimizer (manual updates such as `p.data.add_(p.grad, alpha=-lr)`): after a backward, the next
  data fetch or top-level model call is a candidate step end. Candidates are held until
  `MANUAL_AFTER_CYCLES` cycles have passed with no optimizer step, then written; an optimizer step
  discards them (they were micro-batches of a gradient-accumulation step).
- Evaluation inside training: a top-level eval-mode call of the trained model under no_grad ends an
  `eval` step of its own (`hooks._after_top_level_call`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pinchpoint.capture.agent import Agent

MANUAL_AFTER_CYCLES = 8
"""Forward/backward cycles with no optimizer step: then the program updates its parameters itself
(`p.data.add_(p.grad, alpha=-lr)`) and each cycle is a step. Fewer would split the first optimizer
step of a gradient-accumulation loop into its micro-batches; 8 is a long accumulation on a CPU."""


def boundary(agent: Agent, t_ns: int) -> None:
    """A data fetch or top-level call starts at `t_ns` after a backward, with no optimizer step
    ever: in a manual-update loop this is where the step ends; the time since the backward is
    the update (`optimizer`)."""
    agent.await_boundary = False
    if agent.lead_optimizer is not None or agent.role != "main":
        return
    update = ["optimizer", agent.last_backward_end_ns, t_ns] if t_ns > agent.last_backward_end_ns else None
    if agent.mode == "manual":
        if update is not None:
            agent.intervals.append(update)
        agent.end_step("train", t_ns)
        return
    agent.pending.append((t_ns, agent.counters(), update))
    if len(agent.pending) >= MANUAL_AFTER_CYCLES:
        declare_manual(agent)


def declare_manual(agent: Agent) -> None:
    """No optimizer steps here: write the candidate steps held so far, each with its update."""
    agent.mode = "manual"
    pending, agent.pending = agent.pending, []
    rest = agent.intervals
    for t_ns, counters, update in pending:
        agent.intervals = [iv for iv in rest if iv[1] < t_ns] + ([update] if update is not None else [])
        rest = [iv for iv in rest if iv[1] >= t_ns]
        agent.end_step("train", t_ns, counters=counters)
    agent.intervals = rest


def optimizer_stepped(agent: Agent) -> None:
    """An optimizer step: candidate manual boundaries were micro-batches of this step."""
    agent.pending = []
    agent.await_boundary = False
    if agent.mode == "manual":
        agent.mode = "train"


def eval_step(agent: Agent, t_ns: int) -> None:
    """A top-level evaluation call of the trained model ended: what ran since the last step
    (the eval batch's fetch and forward) is an evaluation step of its own."""
    if agent.pending:
        declare_manual(agent)  # nobody evaluates in the middle of an accumulation
    agent.await_boundary = False
    agent.end_step("eval", t_ns)
