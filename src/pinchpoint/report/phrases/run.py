"""Time outside the training steps (run.rollouts, run.evaluation, run.startup, run.stalled) in words."""

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


def _startup(ns: int, wall_ns: int, imports_share: float, building_ns: int, cpu_share: float) -> str:
    return (
        f"Start-up takes {ns / 1e9:.1f} s of the run's {wall_ns / 1e9:.1f} s before the first step; imports "
        f"are {pct(imports_share)} of it, the program's own work {building_ns / 1e9:.1f} s "
        f"({pct(building_ns / max(1, wall_ns))} of the run), on a CPU {pct(cpu_share)} of the time"
    )


def _startup_fix(waits: bool, code: str | None, own: bool) -> str:
    where = f" ({code}{'' if own else ', inside a library'})" if code else ""
    if waits:
        return (
            f"Start-up mostly waits{where}: reading or fetching the same inputs every run. Keep a local copy "
            "(or the decoded result) and load that; priced as start-up's own work removed, the most a cache "
            "can give (loading it costs something)"
        )
    return (
        f"Build it once{where} and save the result (torch.save, a NumPy memmap, datasets' save_to_disk); "
        "later runs load it. If it initialises weights a checkpoint then overwrites, build the model on the "
        "meta device and load with assign=True. Priced as start-up's own work removed, the most a cache can "
        "give (loading it costs something)"
    )


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(str(r) for r in ranks)


def _stalled_rank(
    rank: int, steps: int, ns: int, waits: bool, collective: str | None, code: str | None, inside: str | None
) -> str:
    if waits:
        return (
            f"Rank {rank} made {steps} steps, then waited {ns / 1e9:.0f} s inside "
            f"torch.distributed's {collective or 'collective'}{f' ({code})' if code else ''} until the run ended"
        )
    where = f"{code}" + (f", inside {inside}" if inside else "") if code else "its code was not sampled"
    return (
        f"Rank {rank} made {steps} steps, then spent {ns / 1e9:.0f} s outside any collective: {where}. "
        "The waiting ranks wait for this one"
    )


PHRASES: dict[str, Callable[..., str]] = {
    "run.stalled.title": lambda ranks: (
        f"The run stopped making steps: the other ranks wait in a collective for rank {_ranks(ranks)}"
        if ranks
        else "The run stopped making steps: every rank waits in a collective (different calls, or the "
        "same calls in a different order)"
    ),
    "run.stalled.rank": _stalled_rank,
    "run.stalled.fix": lambda ranks: (
        (
            f"Find why rank {_ranks(ranks)} never reached the collective: its code is named above (a loader "
            "that hangs, a branch only it takes, an exception it caught). "
            if ranks
            else "Make every rank call the same collectives in the same order (a rank-dependent branch "
            "around a collective, or a different number of batches per rank, does this). "
        )
        + "Give the process group a short timeout (init_process_group(timeout=timedelta(minutes=5))) so a hang "
        "fails fast; TORCH_DISTRIBUTED_DEBUG=DETAIL names mismatched collectives"
    ),
    "run.startup.time": _startup,
    "run.startup.once": lambda building_ns, times, longer_x: (
        f"It is paid once a run, whatever the run's length: {building_ns / 1e9:.1f} s every start and every "
        f"restart; on a run with {times}× the steps the same fix gains ×{longer_x:.2f}"
    ),
    "run.startup.fix": _startup_fix,
    "run.startup.snippet": lambda: (
        'cache = Path("cache/tokens.pt")\n'
        "if cache.exists():\n"
        "    tokens = torch.load(cache)\n"
        "else:\n"
        "    tokens = build_tokens(raw_text)   # the start-up work, once\n"
        "    torch.save(tokens, cache)"
    ),
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
