"""Overhead of `pinchpoint run` in default mode: paired runs of the same example with and without it.

    .venv/bin/python benchmarks/overhead.py [--quads 6] [--steps 150] [--arm opwindow-off] [EXAMPLE ...]

Each example prints its own `median_step_ms` (measured by the program, so pinchpoint's start-up and
report time don't count, only what it adds to the steps). Runs come in ABBA quads (bare, profiled,
profiled, bare, then the mirror image), so a drift of the machine's speed during a quad cancels and
neither arm always runs first (the first run of a series was measurably faster here). A quad's ratio is
(sum of profiled) / (sum of bare); the overhead is the median over quads. Target: ≤ 1.02.

`--arm callback` (interleaved mode) runs the framework examples under `pinchpoint run` with their
`--callback` flag, so pinchpoint's Lightning/Trainer callback marks the steps.

`--arm attached` (interleaved mode) starts the bare program and joins it after 3 s with `pinchpoint
attach --opwindow off --no-trials` until it ends: an idle attached agent's cost (its hooks and the
sampler), most of the program's steps running attached.

`--arm live-quiet` (interleaved mode) adds two arms, `run --opwindow off --no-trials` with and without
the live panel (forced on without a terminal), and prints their ratio per round: the panel's own cost,
free of the trials' steps that land in the program's own median.

`--arm opwindow-off` adds a third arm, `pinchpoint run --opwindow off`, to split the op window's share
of the overhead from the hooks' and the sampler's.

`--malloc pinned` runs every arm with glibc's mmap and trim thresholds fixed (MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_). glibc moves its mmap threshold each time a large block is freed, and whether a
program's big tensors then cost thousands of page faults per step depends on its allocation history:
anything that allocates in the process (the op window's profiler does) can move steady-state step time
by ±15% either way. `examples/healthy.py` pins them itself (mallopt), so it measures pinchpoint's own
cost either way.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
DEFAULT = ["examples/healthy.py", "examples/input_fetch.py"]
PATTERN = re.compile(r"median_step_ms=([0-9.]+)")


def step_ms(cmd: list[str], env: dict[str, str], run_dir: Path | None = None) -> float:
    """The program's own median step, from its stdout (or, under `--live`, which sends the program's
    output to the run directory's output.log, from there)."""
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env=env).stdout
    if run_dir is not None and (run_dir / "output.log").is_file():
        out += (run_dir / "output.log").read_text(errors="replace")
    m = PATTERN.search(out)
    if m is None:
        raise RuntimeError(f"no median_step_ms in output of {cmd}")
    return float(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", default=DEFAULT)
    ap.add_argument("--quads", type=int, default=6, help="ABBA quads per arm (4 runs each)")
    ap.add_argument(
        "--program-args",
        default="",
        help="more arguments for every example, e.g. --program-args=--fix (a framework example with "
        "its input fix: compute-bound steps, where a per-step cost shows)",
    )
    ap.add_argument("--steps", type=int, default=150, help="--steps passed to each example")
    ap.add_argument(
        "--arm",
        action="append",
        default=[],
        choices=[
            "opwindow-off",
            "attached",
            "aa",
            "sampler-normal",
            "no-sampler",
            "agent-only",
            "kineto",
            "bootstrap-noop",
            "stacks",
            "stacks-low",
            "pystacks-off",
            "native",
            "stacks-native",
            "live",
            "live-quiet",
            "sampler-rare",
            "callback",
        ],
    )
    ap.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead of quads: ROUNDS rounds, each running bare and every arm once",
    )
    ap.add_argument("--malloc", choices=["default", "pinned"], default="default")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.malloc == "pinned":
        env.update(PINNED_MALLOC)
    py = sys.executable
    pinchpoint = str(Path(py).with_name("pinchpoint"))
    arms: dict[str, list[str]] = {"default": []}
    if "aa" in args.arm and not args.interleave:
        ap.error("--arm aa needs --interleave")
    if "opwindow-off" in args.arm:
        arms["opwindow off"] = ["--opwindow", "off"]
    if "aa" in args.arm:
        arms["A/A"] = []  # the bare program again (interleaved mode only): the noise floor
    if "sampler-normal" in args.arm:  # --opwindow off with the sampler at normal priority
        arms["sampler normal"] = ["--opwindow", "off", "ENV:PINCHPOINT_SAMPLER_SCHED=normal"]
    if "no-sampler" in args.arm:  # --opwindow off, one sample a minute: the hooks alone
        arms["hooks only"] = ["--opwindow", "off", "--interval", "60"]
    if "bootstrap-noop" in args.arm:  # the bare program with the bootstrap on PYTHONPATH, agent not started
        arms["bootstrap no-op"] = ["BARE", "NOAGENT"]
    if "kineto" in args.arm:  # the op window recorded by torch.profiler instead of the op census
        arms["kineto window"] = ["ENV:PINCHPOINT_OP_RECORDER=kineto"]
    if "sampler-rare" in args.arm:  # the default mode but one system sample a minute: the sampler's share
        arms["sampler rare"] = ["--interval", "60"]
    if "stacks" in args.arm:  # deep mode: py-spy samples the program's stacks at 100 Hz
        arms["stacks"] = ["--stacks"]
    if "pystacks-off" in args.arm:  # the default without pinchpoint's own stack sampler
        arms["pystacks off"] = ["ENV:PINCHPOINT_PYSTACKS=0"]
    if "stacks-low" in args.arm:  # py-spy at 5 Hz: what stacks on by default would cost
        arms["stacks-low"] = ["--stacks-rate", "5"]
    if "native" in args.arm:  # perf samples the program's native stacks at 99 Hz
        arms["native"] = ["--native"]
    if (
        "stacks-native" in args.arm
    ):  # both, py-spy unwinding native frames (it pauses the program each sample)
        arms["stacks+native"] = ["--stacks", "--native"]
    if "live" in args.arm:  # the live panel beside the program (forced: the benchmark has no terminal)
        arms["live"] = ["--live", "ENV:PINCHPOINT_LIVE_FORCE=1"]
    if "live-quiet" in args.arm:  # the panel's own cost: with and without it, no op window, no trials
        arms["quiet"] = ["--opwindow", "off", "--no-trials"]
        arms["live quiet"] = ["--live", "--opwindow", "off", "--no-trials", "ENV:PINCHPOINT_LIVE_FORCE=1"]
    if "callback" in args.arm:  # the framework examples with pinchpoint's callback (--callback) as well
        arms["callback"] = ["ARG:--callback"]
    if "attached" in args.arm:  # the bare program, joined after start-up by `pinchpoint attach` (no window)
        arms["attached"] = ["ATTACH"]
    if "agent-only" in args.arm:  # the agent in the bare program: no launcher, no sampler, no window
        arms["agent only"] = ["BARE", "ENV:PINCHPOINT_OPWINDOW=off"]
    print(f"{args.quads} ABBA quads per arm, --steps {args.steps}, {args.malloc} malloc")
    worst = 0.0
    for ex in args.examples:
        prog = [ex, "--steps", str(args.steps), *args.program_args.split()]
        if args.interleave:
            worst = max(worst, interleaved(ex, prog, arms, args.interleave, py, pinchpoint, env))
            continue
        for arm, opts in arms.items():
            ratios, bare_all, prof_all = [], [], []
            for q in range(args.quads):
                order = ["b", "p", "p", "b"] if q % 2 == 0 else ["p", "b", "b", "p"]
                bare, prof = [], []
                for kind in order:
                    if kind == "b":
                        bare.append(step_ms([py, *prog], env))
                    else:
                        with tempfile.TemporaryDirectory() as tmp:
                            cmd = [pinchpoint, "run", "-q", *opts, "-o", f"{tmp}/run", *prog]
                            prof.append(step_ms(cmd, env))
                ratios.append(sum(prof) / sum(bare))
                bare_all += bare
                prof_all += prof
            med = statistics.median(ratios)
            if arm == "default":
                worst = max(worst, med)
            print(
                f"{ex:28} {arm:13} bare {statistics.median(bare_all):7.2f} ms  profiled "
                f"{statistics.median(prof_all):7.2f} ms  overhead {med:6.3f} (quads: "
                f"{', '.join(f'{r:.3f}' for r in ratios)})",
                flush=True,
            )
    print(f"worst default-mode overhead: {worst:.3f} (target ≤ 1.02)")
    return 0


def interleaved(
    ex: str,
    prog: list[str],
    arms: dict[str, list[str]],
    rounds: int,
    py: str,
    pinchpoint: str,
    env: dict[str, str],
) -> float:
    """Every arm and the bare program once per round, in an order that rotates (and reverses every
    other round), so each arm is compared with bare runs taken minutes, not quarters of an hour,
    apart. Prints per arm the median ratio over rounds and a 95% bootstrap interval of the mean."""
    import random

    names = ["bare", *arms]
    ratios: dict[str, list[float]] = {a: [] for a in arms}
    in_window: dict[str, list[float]] = {}
    panel: list[float] = []
    for r in range(rounds):
        k = r % len(names)
        order = names[k:] + names[:k]
        if (r // len(names)) % 2:
            order.reverse()
        got: dict[str, float] = {}
        for name in order:
            if name in ("bare", "A/A"):
                got[name] = step_ms([py, *prog], env)
            elif "ATTACH" in arms[name]:
                got[name] = attached_step_ms([py, *prog], pinchpoint, env)
            elif "BARE" in arms[name]:
                extra = dict(o[4:].split("=", 1) for o in arms[name] if o.startswith("ENV:"))
                with tempfile.TemporaryDirectory() as tmp:
                    agent_env = {
                        **env,
                        **extra,
                        "PINCHPOINT_RUN_DIR": tmp,
                        "PYTHONPATH": str(ROOT / "src/pinchpoint/capture/_bootstrap"),
                    }
                    if "NOAGENT" in arms[name]:
                        del agent_env["PINCHPOINT_RUN_DIR"]
                    got[name] = step_ms([py, *prog], agent_env)
            else:
                opts = [o for o in arms[name] if not o.startswith(("ENV:", "ARG:"))]
                extra = dict(o[4:].split("=", 1) for o in arms[name] if o.startswith("ENV:"))
                args_ = [o[4:] for o in arms[name] if o.startswith("ARG:")]  # to the program
                with tempfile.TemporaryDirectory() as tmp:
                    cmd = [pinchpoint, "run", "-q", *opts, "-o", f"{tmp}/run", *prog, *args_]
                    got[name] = step_ms(cmd, {**env, **extra}, Path(tmp) / "run")
                    w = window_ratio(Path(tmp) / "run")
                    if w is not None:
                        in_window.setdefault(name, []).append(w)
        for a in arms:
            ratios[a].append(got[a] / got["bare"])
        if "quiet" in got and "live quiet" in got:  # the panel against the same run without it
            panel.append(got["live quiet"] / got["quiet"])
        print(f"  round {r + 1}: " + ", ".join(f"{a} {got[a] / got['bare']:.3f}" for a in arms), flush=True)
    rng = random.Random(0)
    worst = 0.0
    for a, xs in ratios.items():
        means = sorted(statistics.fmean(rng.choices(xs, k=len(xs))) for _ in range(2000))
        lo, hi = means[50], means[1949]
        med = statistics.median(xs)
        if a == "default":
            worst = max(worst, med)
        print(
            f"{ex:28} {a:13} overhead median {med:.3f}, mean {statistics.fmean(xs):.3f} "
            f"(95% interval of the mean {lo:.3f}-{hi:.3f}, {len(xs)} rounds)",
            flush=True,
        )
    if panel:
        print(
            f"{ex:28} live panel    live quiet / quiet: median {statistics.median(panel):.3f}, "
            f"mean {statistics.fmean(panel):.3f} ({len(panel)} rounds)",
            flush=True,
        )
    for a, ws in in_window.items():
        print(
            f"{ex:28} {a:13} steps inside the op window: median {statistics.median(ws):.3f} of the others "
            f"(same run; {len(ws)} runs)",
            flush=True,
        )
    return worst


ATTACH_AFTER_S = 3.0
"""The attach begins this long after the program starts (torch imported, the loop running)."""


def attached_step_ms(cmd: list[str], pinchpoint: str, env: dict[str, str]) -> float:
    """The program started bare and joined by `pinchpoint attach` (no op window, no trials) until it
    ends: its own median step, most of whose steps ran with the attached agent and the sampler."""
    import time

    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    time.sleep(ATTACH_AFTER_S)
    with tempfile.TemporaryDirectory() as tmp:
        att = subprocess.run(
            [pinchpoint, "attach", str(proc.pid), "--duration", "3600", "--opwindow", "off", "--no-trials",
             "-q", "-o", f"{tmp}/run"],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
    out, err = proc.communicate()
    if att.returncode != 5:  # the program ended during the attach, as it should
        raise RuntimeError(f"attach ended with {att.returncode}: {att.stderr[-500:]}")
    m = PATTERN.search(out)
    if m is None:
        raise RuntimeError(f"no median_step_ms in output of {cmd}: {err[-1000:]}")
    return float(m.group(1))


def window_ratio(run_dir: Path) -> float | None:
    """Median step inside the op window over the median step outside it, within one profiled run
    (the steps after warm-up; the step that runs the window's probes is neither)."""
    import json

    try:
        steps = [json.loads(line) for line in (run_dir / "ranks/rank0/steps.jsonl").read_text().splitlines()]
        n = int(json.loads((run_dir / "ranks/rank0/probes.json").read_text()).get("window_steps") or 0)
    except (OSError, ValueError):
        return None
    profiled = sorted(s["step"] for s in steps if s.get("profiled"))[:n]
    dur = {s["step"]: s["end_ns"] - s["start_ns"] for s in steps}
    inside = [dur[i] for i in profiled]
    outside = [
        d for i, d in dur.items() if i >= 3 and not any(s["step"] == i and s.get("profiled") for s in steps)
    ]
    if not inside or not outside:
        return None
    return statistics.median(inside) / statistics.median(outside)


if __name__ == "__main__":
    sys.exit(main())
