"""What `pinchpoint run` adds to a short program, at three step sizes: the fixed cost and the per-step
cost, as whole processes and as the program's own loop.

    .venv/bin/python benchmarks/fixed_cost.py [--pairs 3] [--steps 25] [--step-ms 20 200 700]

The program is a plain training loop (an MLP of 1024-wide layers, batch 64, SGD) whose depth is
calibrated so that a step takes about `--step-ms` on this machine; it prints its own loop time. Each
size runs in alternating pairs (bare, then under `pinchpoint run -q`, then the mirror), and the table
gives the medians of: what pinchpoint added to the program's run (from the launch to the program's
exit: pinchpoint's start-up, its agent, op window, probes and trials inside the program), the report
built after it, the whole process's added wall clock (both), the loop's added time, and the budget the
issue sets for pinchpoint's work inside the program (0.5 s + 2% of the loop). Run it on an idle
machine: two PyTorch programs on 2 cores distort each other.

pinchpoint runs with a pinchpoint home of its own: `--probe-cache warm` (the default) first runs the
middle-sized program under pinchpoint three times, so the machine's probes are kept as on a machine
pinchpoint has run on before (`capture/machine_probes.py`); `--probe-cache off` measures them in
every run, as the first runs on a new machine do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAM = r"""
import argparse, time, torch
from torch import nn
p = argparse.ArgumentParser()
p.add_argument("--layers", type=int, required=True)
p.add_argument("--steps", type=int, required=True)
a = p.parse_args()
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(a.layers) for m in (nn.Linear(1024, 1024), nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 1024)
t0 = time.perf_counter()
for _ in range(a.steps):
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"loop_s={time.perf_counter() - t0:.4f}")
"""
LOOP = re.compile(r"loop_s=([0-9.]+)")
BUDGET_FIXED_S = 0.5
BUDGET_PER_STEP = 0.02


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(whole-process wall s, the program's own loop s)."""
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, env=env)
    wall = time.monotonic() - t0
    m = LOOP.search(res.stdout + res.stderr)
    if res.returncode != 0 or m is None:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}): {(res.stdout + res.stderr)[-1500:]}")
    return wall, float(m.group(1))


def _report_s(run_dir: Path) -> float:
    """Seconds from the program's exit (meta.json's `ended_ns`, the monotonic clock) to now."""
    ended_ns = json.loads((run_dir / "meta.json").read_text())["ended_ns"]
    return time.monotonic() - ended_ns / 1e9


def _layers_for(script: Path, step_ms: float) -> int:
    """The depth at which a step takes about `step_ms` here (from a 4-layer, 10-step calibration)."""
    _, loop = _run([sys.executable, str(script), "--layers", "4", "--steps", "10"])
    per_layer_ms = loop * 1000 / 10 / 4
    return max(1, round(step_ms / per_layer_ms))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--step-ms", type=float, nargs="+", default=[20.0, 200.0, 700.0])
    ap.add_argument("--probe-cache", choices=("warm", "off"), default="warm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "loop.py"
        script.write_text(PROGRAM)
        env = {**os.environ, "PINCHPOINT_HOME": str(Path(tmp) / "home"), "PINCHPOINT_NO_HISTORY": "1"}
        if args.probe_cache == "off":
            env["PINCHPOINT_PROBE_CACHE"] = "off"
        else:
            # a program whose steps fault pages in (the middle size's), so every probe is kept
            layers = _layers_for(script, sorted(args.step_ms)[len(args.step_ms) // 2])
            warm = [sys.executable, str(script), "--layers", str(layers), "--steps", "16"]
            for _ in range(3):
                _run([sys.executable, "-m", "pinchpoint", "run", "-q", "--force", "-o", str(Path(tmp) / "warm"), "--", *warm], env)
        print(
            "step    layers  bare wall  to program  report  added wall  bare loop  added loop  budget  within"
        )
        for step_ms in args.step_ms:
            layers = _layers_for(script, step_ms)
            bare_cmd = [sys.executable, str(script), "--layers", str(layers), "--steps", str(args.steps)]
            run_dir = Path(tmp) / f"run-{step_ms:g}"
            pp_cmd = [sys.executable, "-m", "pinchpoint", "run", "-q", "--force", "-o", str(run_dir), "--", *bare_cmd]
            added_wall, added_loop, bare_walls, bare_loops, to_program, reports = [], [], [], [], [], []
            for i in range(args.pairs):
                order = [bare_cmd, pp_cmd] if i % 2 == 0 else [pp_cmd, bare_cmd]
                got = {}
                for c in order:
                    got[id(c)] = _run(c, env)
                    if c is pp_cmd:
                        reports.append(_report_s(run_dir))
                (bw, bl), (pw, pl) = got[id(bare_cmd)], got[id(pp_cmd)]
                to_program.append(pw - reports[-1] - bw)
                added_wall.append(pw - bw)
                added_loop.append(pl - bl)
                bare_walls.append(bw)
                bare_loops.append(bl)
            loop = statistics.median(bare_loops)
            budget = BUDGET_FIXED_S + BUDGET_PER_STEP * loop
            program = statistics.median(to_program)
            print(
                f"{statistics.median(bare_loops) / args.steps * 1000:5.0f} ms {layers:6d}  "
                f"{statistics.median(bare_walls):8.2f} s  {program:+9.2f} s  {statistics.median(reports):5.2f} s  "
                f"{statistics.median(added_wall):+9.2f} s  {loop:8.2f} s  "
                f"{statistics.median(added_loop):+9.2f} s  {budget:5.2f} s  {'yes' if program <= budget else 'no'}"
            )


if __name__ == "__main__":
    main()
