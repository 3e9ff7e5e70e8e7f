"""The measured truth of the examples, for the machine the tests run on (examples/TRUTH.md has one
section per machine kind; examples/measure_truth.py names the kinds and writes the sections)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRUTH = EXAMPLES / "TRUTH.md"
NATIVE_BF16 = ("-amx", "-bf16")


@functools.cache
def machine_kind() -> str:
    """This machine's kind as examples/measure_truth.py names its TRUTH.md section."""
    spec = importlib.util.spec_from_file_location("measure_truth", EXAMPLES / "measure_truth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.machine_kind())


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
    """example -> {fix label: measured share (what=1) or speedup (what=0)} for this machine kind: its own
    section's rows, then, for examples it lacks, the nearest kind's (same bf16 class first: the examples
    use bf16 autocast exactly where the CPU has native bf16)."""
    kind = kind or machine_kind()
    found = sections()
    native = kind.endswith(NATIVE_BF16)
    order = sorted(found, key=lambda k: (k != kind, k.endswith(NATIVE_BF16) != native, k))
    out: dict[str, dict[str, float]] = {}
    for k in reversed(order):
        for example, fixes in found[k].items():
            out[example] = {label: pair[what] for label, pair in fixes.items()}
    return out


def measured_causes(example: str, planted: str) -> dict[str, float]:
    """category -> the largest share its fixes removed on this machine kind, for one example. A fix
    label naming a category in parentheses (`glibc env (memory.pressure)`) measured that cause; the
    others measured the planted one."""
    out: dict[str, float] = {}
    for label, share in machine_truth().get(example, {}).items():
        cause = label[label.rindex("(") + 1 : -1] if label.endswith(")") and "(" in label else planted
        out[cause] = max(share, out.get(cause, share))
    return out


TOP_MARGIN = 0.10
"""Causes whose measured shares are within 10 points of the largest are a tie on these machines (run
to run, the same fix measures ±5-10 points here)."""


def acceptable_tops(example: str, planted: str, real: float) -> set[str]:
    """The causes a report's top finding may name: real ones (their fix removed at least `real` of the
    step) within `TOP_MARGIN` of the largest."""
    causes = {c: s for c, s in measured_causes(example, planted).items() if s >= real}
    best = max(causes.values(), default=0.0)
    return {c for c, s in causes.items() if s >= best - TOP_MARGIN}
