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
        f"{'Rollouts' if kind == 'rollouts' else 'Evaluation'} take {pct(share)} of the run "
        f"({ns / 1e9:.1f} s of {wall_ns / 1e9:.1f} s): {what}, {ms(call_ns)} per call (median)"
    )


def _parts(forward_share: float, wait_share: float, torch_share: float | None) -> str:
    out = f"Of that time, the model's forward is {pct(forward_share)}"
    if wait_share >= 0.01:
        out += f", waiting for the DataLoader {pct(wait_share)}"
    if torch_share is not None:
        out += f"; torch's Python (module calls, distributions, tensor building) {pct(torch_share)} of the samples"
    return out


PHRASES: dict[str, Callable[..., str]] = {
    "run.between.time": _time,
    "run.between.parts": _parts,
    "where.segment": lambda name: f"in the {name}",
    "run.rollouts.fix": lambda envs, batched_share: (
        f"Step {envs} environments together (vectorised environments) and call the policy once per step "
        f"for all of them: the same transitions per update in 1/{envs} of the calls. Priced as the "
        f"calls' torch work ({pct(batched_share)} of the rollouts) paid once for {envs} environments; the "
        "environments' own Python stays"
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
