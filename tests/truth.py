"""The measured truth of the examples, for the machine the tests run on (examples/TRUTH.md has one
section per machine kind; examples/measure_truth.py names the kinds and writes the sections)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRUTH = EXAMPLES / "TRUTH.md"
NATIVE_BF16 = ("-amx", "-bf16")


@functools.cache
def _measure_truth() -> Any:
    """examples/measure_truth.py as a module (it names the kinds and runs the variants)."""
    spec = importlib.util.spec_from_file_location("measure_truth", EXAMPLES / "measure_truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def machine_kind() -> str:
    """This machine's kind as examples/measure_truth.py names its TRUTH.md section."""
    return str(_measure_truth().machine_kind())


@functools.cache
def sections() -> dict[str, dict[str, dict[str, tuple[float, float]]]]:
    """machine kind -> example -> {fix label: (measured speedup, measured share)}."""
    out: dict[str, dict[str, dict[str, tuple[float, float]]]] = {}
    kind = ""
    for line in TRUTH.read_text().splitlines():
        if line.startswith("## Machine: "):
            kind = line.removeprefix("## Machine: ").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if kind and len(cells) >= 7 and cells[6].endswith("%") and cells[2].startswith("`"):
            measured = (float(cells[5].rstrip("x")), float(cells[6].rstrip("%")) / 100)
            out.setdefault(kind, {}).setdefault(cells[0], {})[cells[2].strip("`")] = measured
    return out


@functools.cache
def baseline_ms(example: str, kind: str | None = None) -> float | None:
    """The example's planted median step (ms) in this machine kind's truth rows: the speed the machine
    ran at when its truth was measured."""
    kind = kind or machine_kind()
    section = ""
    for line in TRUTH.read_text().splitlines():
        if line.startswith("## Machine: "):
            section = line.removeprefix("## Machine: ").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section == kind and len(cells) >= 7 and cells[0] == example and cells[2].startswith("`"):
            try:
                return float(cells[3])
            except ValueError:
                return None
    return None


def machine_truth(kind: str | None = None, what: int = 1) -> dict[str, dict[str, float]]:
    """example -> {fix label: measured share (what=1) or speedup (what=0)}: this machine kind's own
    section only. A truth is only true on the kind it was measured on (hf_clm's bf16 row from an
    avx512_bf16 EPYC failed a fresh clone's suite on an AVX2 one); an example this kind lacks has no
    entry, and its tests assert what holds on any machine (`without_a_row`)."""
    return {
        example: {label: pair[what] for label, pair in fixes.items()}
        for example, fixes in sections().get(kind or machine_kind(), {}).items()
    }


def nearest_truth(example: str, what: int = 0) -> tuple[str, dict[str, float]] | None:
    """(kind, {fix label: speedup (what=0) or share}) from the nearest kind that measured the example,
    of this kind's bf16 class only (the examples use bf16 autocast exactly where the CPU has native
    bf16, so a fix's direction carries over within a class, never across); this kind's own first."""
    kind = machine_kind()
    native = kind.endswith(NATIVE_BF16)
    for k in sorted(sections(), key=lambda k: (k != kind, k)):
        fixes = sections()[k].get(example)
        if fixes and k.endswith(NATIVE_BF16) == native:
            return k, {label: pair[what] for label, pair in fixes.items()}
    return None


def any_truth(example: str) -> bool:
    """Some kind measured the example."""
    return any(example in rows for rows in sections().values())


def missing_row(example: str) -> str | None:
    """Why the ordering of an example's findings cannot be held to a truth here (None: it can)."""
    if example in machine_truth():
        return None
    return (
        f"examples/TRUTH.md has no {machine_kind()} row for {example}: the ordering is checked only "
        "against this kind's own measurement (measure it on an idle machine with "
        "`python examples/measure_truth.py --missing --markdown`)"
    )


SLOWER = 1 / 1.05
"""A fix that measured below x0.95 made the program slower, beyond the run-to-run noise."""


def cause_of(label: str, planted: str) -> str:
    """The category a truth row's fix measured: `glibc env (memory.pressure)` names it; the others
    (`--fix`, `--workers 1`) measured the planted one."""
    return label[label.rindex("(") + 1 : -1] if label.endswith(")") and "(" in label else planted


def without_a_row(
    example: str, planted: Sequence[str], findings: Sequence[dict[str, Any]], summary: str
) -> None:
    """Where this kind has no truth row for the example: assert what holds on any machine, then skip
    only the ordering check, naming the missing row. What holds anywhere: the planted cause is named,
    and no finding promises a gain from a fix that measured slower on the nearest kind (bf16 where it
    is emulated, a worker for batches too small to ship). Returns when this kind has its row."""
    reason = missing_row(example)
    if reason is None:
        return
    ids = [f["id"] for f in findings]
    assert not planted or set(planted) & set(ids), summary
    nearest = nearest_truth(example)
    if nearest is not None:
        kind, speedups = nearest
        single = planted[0] if len(planted) == 1 else ""
        for label, speedup in speedups.items():
            cause = cause_of(label, single)
            if speedup >= SLOWER or not cause or not (label == "--fix" or label.endswith(")")):
                continue  # (a worker count or a preload is one way among several of fixing a cause)
            promised = [f for f in findings if f["id"] == cause and f["estimated_speedup"] > 1 / SLOWER]
            assert not promised, (
                f"{cause} promises a gain; `{label}` measured x{speedup:.2f} on {kind}; {summary}"
            )
    pytest.skip(reason)


def measured_causes(example: str, planted: str) -> dict[str, float]:
    """category -> the largest share its fixes removed on this machine kind, for one example. A fix
    label naming a category in parentheses (`glibc env (memory.pressure)`) measured that cause; the
    others measured the planted one."""
    out: dict[str, float] = {}
    for label, share in machine_truth().get(example, {}).items():
        cause = cause_of(label, planted)
        out[cause] = max(share, out.get(cause, share))
    return out


TOP_MARGIN = 0.10
"""Causes whose measured shares are within 10 points of the largest are a tie on these machines (run
to run, the same fix measures ±5-10 points here)."""


def acceptable_tops(example: str, planted: str, real: float) -> set[str]:
    """The causes a report's top finding may name: real ones (their fix removed at least `real` of the
    step) within `TOP_MARGIN` of the largest."""
    return tops_of(measured_causes(example, planted), real)


LIVE_REPS = 2
"""Alternations of the planted program and each fix when a truth is measured again now."""


@functools.cache
def live_causes(example: str, planted: str, causes: frozenset[str]) -> dict[str, float]:
    """category -> the largest share its fixes remove *now*, on this machine: the planted program and
    each fix of a cause in `causes` run alternately `LIVE_REPS` times (examples/measure_truth.py's
    variants), each row's median step against the planted one's. For a report that disagrees with the
    stored row: a VM's speed drifts between days (a thread fix measured x1.81 one day and x1.25-1.36 on
    the same kind later; a fresh clone's CI met its glibc trial at x1.27 where the row says x1.02), and
    a truth is the fix measured on this machine, so the disagreement is settled by measuring again."""
    mt = _measure_truth()
    labels = [label for label, _ in mt.EXAMPLES[example][1] if cause_of(label, planted) in causes]
    out: dict[str, float] = {}
    for label, speedup in live_speedups(example, labels).items():
        cause = cause_of(label, planted)
        out[cause] = max(1 - 1 / speedup, out.get(cause, -1.0))
    return out


def live_speedups(example: str, labels: Sequence[str]) -> dict[str, float]:
    """label -> the speedup its variant (examples/measure_truth.py) measures *now*: the planted program
    and each variant run alternately `LIVE_REPS` times, median step against median step (variants whose
    malloc is not installed here left out)."""
    mt = _measure_truth()
    fixes = [
        (label, argv)
        for label, argv in mt.EXAMPLES[example][1]
        if label in labels
        and all(mt.preloaded(a.removeprefix("preload:")) for a in argv if a.startswith("preload:"))
    ]
    times: dict[str, list[float]] = {label: [] for label, _ in [("", []), *fixes]}
    for _ in range(LIVE_REPS):
        for label, argv in [("", []), *fixes]:
            tokens, _, _ = mt.run_once(example, argv, 600)
            times[label].append(mt.step_ms(tokens))
    before = sorted(times[""])[len(times[""]) // 2]
    return {label: before / sorted(times[label])[len(times[label]) // 2] for label, _ in fixes}


def tops_of(causes: dict[str, float], real: float) -> set[str]:
    """The causes a top finding may name among measured ones: real (their fix removed at least `real`
    of the step) and within `TOP_MARGIN` of the largest."""
    kept = {c: s for c, s in causes.items() if s >= real}
    best = max(kept.values(), default=0.0)
    return {c for c, s in kept.items() if s >= best - TOP_MARGIN}


def holds_now(example: str, planted: str, top: str, named: bool, real: float) -> str:
    """Where a report's top finding (`top`) or its naming of the planted cause (`named`) disagrees with
    the stored truth: measure both fixes again now and return why the report is wrong on this machine
    today ("" when it is right: the top's fix measures at least as much as the planted one, within the
    margin, and the planted fix still pays if the report left it out)."""
    live = live_causes(example, planted, frozenset({planted, top}))
    said = ", ".join(f"{c} {s:+.0%}" for c, s in sorted(live.items()))
    if not named and live.get(planted, 0.0) >= real:
        return f"{planted} not named, yet its fix removes {live[planted]:.0%} of the step now ({said})"
    if top == planted or top in tops_of(live, real):
        return ""
    if live.get(planted, 0.0) < real and top not in live:
        return ""  # the planted fix no longer pays, and the top's fix is not one these examples measure
    return f"{top} leads; measured again now: {said}"
