"""Time outside the training steps (run.rollouts, run.evaluation) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct


def _time(kind: str, share: float, ns: int, wall_ns: int, passes: int, calls: int, call_ns: int) -> str:
    what = (
        f"{passes} rollouts of {calls / max(1, passes):,.0f} environment steps, one policy call each"
        if kind == "rollouts"
        else f"{passes} evaluation passes of {calls / max(1, passes):,.0f} batches"
    )
    return (
        f"{'Rollouts' if kind == 'rollouts' else 'Evaluation passes'} take {pct(share)} of the run "
        f"({ns / 1e9:.1f} s of {wall_ns / 1e9:.1f} s, start-up and shutdown aside): {what}, {ms(call_ns)} "
        "per call (median)"
    )


def _parts(
    kind: str,
    forward_share: float,
    wait_share: float,
    batched_share: float | None,
    after_pass_ns: int,
    passes: int,
) -> str:
    out = f"Of that time, the model's forward is {pct(forward_share)}"
    if wait_share >= 0.01:
        out += f", waiting for the DataLoader {pct(wait_share)}"
    if kind != "rollouts":
        return out
    if batched_share is not None:
        out += (
            f"; by the stack samples, {pct(batched_share)} is torch work or the loop's own lines (a batched "
            f"call pays it once), {pct(1 - batched_share)} the code the loop calls (the environment)"
        )
    if after_pass_ns > 0:
        out += (
            f"; the first update after each pass runs {ms(after_pass_ns / max(1, passes))} longer than the others "
            "(work over the pass's transitions one by one: advantages, returns)"
        )
    return out


PHRASES: dict[str, Callable[..., str]] = {
    "run.between.time": _time,
    "run.between.parts": _parts,
    "where.segment": lambda name: f"in the {name}",
    "run.rollouts.fix": lambda envs, batched_share: (
        f"Step {envs} environments together (vectorised environments) and call the policy once per step "
        f"for all of them: the same transitions per update in 1/{envs} of the calls. Priced as the "
        f"calls' batched work ({pct(batched_share)} of the rollouts) and the per-transition work after each "
        f"pass paid once for {envs} environments; the environments' own code stays"
    ),
    "run.rollouts.snippet": lambda envs: (
        f"envs = gymnasium.vector.SyncVectorEnv([make_env] * {envs})   # or n_envs={envs} in your library\n"
        "obs, _ = envs.reset()\n"
        "for _ in range(rollout_steps // envs.num_envs):\n"
        "    with torch.no_grad():\n"
        "        action = policy(torch.as_tensor(obs))   # one call, a batch of envs\n"
        "    obs, reward, term, trunc, _ = envs.step(action.numpy())"
    ),
    "run.evaluation.fix": lambda every, ceiling_x: (
        f"Evaluate every {every} epochs (or on a subset of the evaluation data) under torch.inference_mode(): "
        f"priced for passes half as often; without evaluation the run would be ×{ceiling_x:.2f} faster "
        "(the ceiling)"
    ),
}
