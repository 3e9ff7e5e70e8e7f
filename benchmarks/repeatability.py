"""Repeatability of the diagnosis (issue 31): the same example run N times under `pinchpoint run`, one
after the other on an idle machine, should name the same top finding (among the program's own findings)
with estimates within 15% of each other. Per example: each run's top finding, its estimate, median step
and the load other processes put on the machine meanwhile; then the spread (max / min - 1) of the top
estimate, of every finding present in all runs, and of the median step.

    .venv/bin/python benchmarks/repeatability.py [EXAMPLE ...] [-n 3] [--steps N] [--ddp] [--markdown]

Default examples: those that declare `PLANTED = [...]` and have a truth row for this machine kind in
examples/TRUTH.md (torchrun examples only with --ddp). Before each run it waits (up to 60 s) until
other processes use under 10% of the CPUs; a run beside load is marked `*`.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT / "tests"))
from programs import CONTENDED_CORES, foreign_cores, planted, programs_own, report_of  # noqa: E402
from test_examples_e2e import _launch  # noqa: E402
from truth import machine_kind, sections  # noqa: E402

TARGET = 0.15
"""Estimates of the same finding within 15% of each other (max / min - 1)."""
QUIET = 10.0
"""Other processes under 10% of the CPUs before a run starts (examples/measure_truth.py's threshold)."""


def busy() -> tuple[float, float]:
    """CPU seconds of this machine's processes and its steal (the hypervisor's, not theirs), all cores."""
    t = psutil.cpu_times()._asdict()
    return sum(t.get(f, 0.0) for f in ("user", "nice", "system", "irq", "softirq")), t.get("steal", 0.0)


def wait_for_quiet(max_wait: float = 60.0) -> float:
    """Until this machine's processes use under `QUIET`% of it (steal is not theirs); the last % seen."""
    deadline, seen = time.time() + max_wait, 100.0
    while time.time() < deadline:
        t = psutil.cpu_times_percent(interval=1.0)
        seen = t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)
        if seen <= QUIET:
            break
    return seen


def takes_steps(script: Path) -> bool:
    """The example's argparse has `--steps` (its own, or that of the example whose parse_args it imports)."""
    text = script.read_text()
    borrowed = re.search(r"^from (\w+) import [^\n]*\bparse_args\b", text, re.M)
    if borrowed is not None:
        text += (script.parent / f"{borrowed.group(1)}.py").read_text()
    return '"--steps"' in text


def defaults(ddp: bool) -> list[str]:
    rows = sections().get(machine_kind(), {})
    return [
        p.stem
        for p in sorted(EXAMPLES.glob("*.py"))
        if re.search(r"^PLANTED = \[", p.read_text(), re.M) and p.stem in rows and (ddp or not _launch(p))
    ]


def run_once(script: Path, steps: int | None, out: Path) -> dict[str, Any]:
    """One `pinchpoint run`; its top finding, estimates, median step and the foreign load around it."""
    launch = _launch(script)  # torchrun for the DDP examples, as the e2e tests launch them
    argv = [*launch, str(script)] if launch else [sys.executable, str(script)]
    if steps is not None and takes_steps(script):
        argv += ["--steps", str(steps)]
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"} | {"HF_HUB_OFFLINE": "1"}
    pinchpoint = str(Path(sys.executable).with_name("pinchpoint"))
    quiet = wait_for_quiet()
    r0, (b0, s0), w0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy(), time.perf_counter()
    done = subprocess.run(
        [pinchpoint, "run", "-q", "--force", "-o", str(out), "--", *argv],
        cwd=out.parent, capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    wall, (b1, s1), r1 = time.perf_counter() - w0, busy(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or not (out / "report.json").is_file():
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"`pinchpoint run` of {script.name} exited {done.returncode}: {last[:200]}")
    report = report_of(out)
    own_cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    cores = psutil.cpu_count() or 1
    foreign = max(0.0, (b1 - b0) - own_cpu) / wall  # cores' worth other processes kept busy
    findings = programs_own(report, planted(script))
    estimates: dict[str, float] = {}
    for f in findings:
        estimates.setdefault(f["id"], float(f["estimated_speedup"]))
    note = foreign_cores(report)
    return {
        "top": findings[0]["id"] if findings else "(none)",
        "top_est": float(findings[0]["estimated_speedup"]) if findings else 1.0,
        "estimates": estimates,
        "median_ms": report["steps"].get("median_ms"),
        "foreign": foreign,
        "note": note,
        "steal": max(0.0, s1 - s0) / wall / cores,
        "loaded": note >= CONTENDED_CORES or foreign >= CONTENDED_CORES or quiet > QUIET,
    }


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1 if values and min(values) > 0 else float("nan")


def pct(x: float) -> str:
    return "—" if x != x else f"{x:.1%}"


def report_example(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Print one example's runs and spreads; its row for the markdown table."""
    print(f"\n{name}")
    print(
        f"  {'run':>3}  {'top finding':22} {'est. ×':>7} {'median ms':>10} {'foreign':>8} {'note':>5} {'steal':>6}"
    )
    for i, r in enumerate(runs, 1):
        ms = f"{r['median_ms']:.2f}" if r["median_ms"] is not None else "—"
        print(
            f"  {i:>3}{'*' if r['loaded'] else ' '} {r['top']:22} {r['top_est']:>7.2f} {ms:>10} "
            f"{r['foreign']:>8.2f} {r['note']:>5.2f} {r['steal']:>6.0%}"
        )
    tops = {r["top"] for r in runs}
    agree = len(tops) == 1
    top_spread = spread([r["top_est"] for r in runs])
    common = set.intersection(*(set(r["estimates"]) for r in runs))
    per_finding = {fid: spread([r["estimates"][fid] for r in runs]) for fid in common}
    steps = [r["median_ms"] for r in runs if r["median_ms"] is not None]
    step_spread = spread(steps) if len(steps) == len(runs) else float("nan")
    holds = agree and top_spread <= TARGET
    print(
        f"  top finding: {'same' if agree else 'differs'} ({', '.join(sorted(tops))}); top estimate spread "
        f"{pct(top_spread)}; median step spread {pct(step_spread)} -> {'PASS' if holds else 'FAIL'}"
    )
    for fid in (f for f in runs[0]["estimates"] if f in common):  # the first run's order
        ests = " ".join(f"{r['estimates'][fid]:.2f}" for r in runs)
        ok = "" if per_finding[fid] <= TARGET else "  (over 15%)"
        print(f"    {fid:24} {'× ' + ests:30} spread {pct(per_finding[fid])}{ok}")
    only = sorted(set().union(*(set(r["estimates"]) for r in runs)) - common)
    if only:
        print(f"    not in every run: {', '.join(only)}")
    worst = max(per_finding.items(), key=lambda kv: kv[1], default=("—", float("nan")))
    return {
        "name": name, "n": len(runs), "top": " / ".join(sorted(tops)), "agree": agree,
        "ests": ", ".join(f"{r['top_est']:.2f}" for r in runs), "top_spread": top_spread,
        "worst": worst, "step_spread": step_spread, "loaded": sum(r["loaded"] for r in runs), "holds": holds,
    }  # fmt: skip


def markdown(rows: list[dict[str, Any]]) -> None:
    print(
        "\n| example | runs | top finding | same top | top est. × | spread | worst finding spread "
        "| median step spread | beside load |\n|---|---:|---|---|---|---:|---|---:|---:|"
    )
    for r in rows:
        fid, w = r["worst"]
        print(
            f"| {r['name']} | {r['n']} | {r['top']} | {'yes' if r['agree'] else '**no**'} | {r['ests']} | "
            f"{pct(r['top_spread'])} | {pct(w)} ({fid}) | {pct(r['step_spread'])} | {r['loaded']} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", help="example names (default: those with a truth row here)")
    ap.add_argument("-n", "--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, help="--steps N for examples that take it (default: their own)")
    ap.add_argument("--ddp", action="store_true", help="include the torchrun examples in the default set")
    ap.add_argument("--markdown", action="store_true", help="also print a table for benchmarks/README.md")
    args = ap.parse_args()
    names = [Path(n).stem for n in args.examples] or defaults(args.ddp)
    for name in names:
        if not (EXAMPLES / f"{name}.py").is_file():
            print(f"error: no example examples/{name}.py", file=sys.stderr)
            return 2
    print(f"machine kind: {machine_kind()}, {psutil.cpu_count()} CPUs; {args.runs} runs each, one at a time")
    print("foreign/note: cores other processes kept busy during the run (measured here / the report's note);")
    print(f"* = beside load (either ≥ {CONTENDED_CORES} cores, or the machine not quiet within 60 s)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs = []
            for i in range(args.runs):
                out = Path(tmp) / f"{name}-{i}" / "run"
                out.parent.mkdir(parents=True)
                try:
                    runs.append(run_once(EXAMPLES / f"{name}.py", args.steps, out))
                except (RuntimeError, subprocess.TimeoutExpired, KeyError, ValueError) as e:
                    print(f"error: {name} run {i + 1}: {str(e).splitlines()[0]}", file=sys.stderr)
                    return 2
            rows.append(report_example(name, runs))
    held = sum(r["holds"] for r in rows)
    print(f"\nsame top finding and top estimate within {TARGET:.0%}: {held} of {len(rows)} examples")
    if args.markdown:
        markdown(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
