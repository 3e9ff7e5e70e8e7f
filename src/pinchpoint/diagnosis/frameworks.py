"""Fixes in the terms of the framework the program runs under: which knob a Lightning or transformers
`Trainer` user actually has (`L.Trainer(precision="bf16-mixed")`, `TrainingArguments(bf16=True)`), found
from the finding's `fix_kind` and `fix_params`, never from its prose, stated as a fact with the values
it names (the proposed setting, the program's current one). The plain-PyTorch fix stays beside it for
code the framework does not own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pinchpoint.diagnosis.finding import Fact, Finding, FixKind
from pinchpoint.trace.run import Framework, FrameworkName

Knob = Callable[[dict[str, int], Framework], Fact]

DEFAULT_WORKERS = 2
"""Workers proposed where the finding does not say how many."""
DEFAULT_MICRO_BATCHES = 2
"""Micro-batches proposed where the finding does not say how many."""
LIGHTNING_PRECISION = "32-true"
"""Lightning's precision when the program sets none."""
LIGHTNING_LOG_EVERY = 50
"""Lightning's `log_every_n_steps` when the program sets none."""
LOG_EVERY = 50
"""Steps between logged metrics proposed to a program that logs (and syncs) every step."""

LIGHTNING: dict[FixKind, Knob] = {
    FixKind.WORKERS: lambda p, fw: Fact(
        "framework.lightning.workers", num_workers=p.get("num_workers", DEFAULT_WORKERS)
    ),
    FixKind.PERSISTENT_WORKERS: lambda p, fw: Fact("framework.lightning.persistent"),
    FixKind.LOAD_IN_PROCESS: lambda p, fw: Fact("framework.lightning.load_in_process"),
    FixKind.BF16_AUTOCAST: lambda p, fw: Fact(
        "framework.lightning.bf16", precision=fw.setting("precision") or LIGHTNING_PRECISION
    ),
    FixKind.FP32: lambda p, fw: Fact("framework.lightning.fp32", precision=fw.setting("precision")),
    FixKind.COMPILE: lambda p, fw: Fact("framework.lightning.compile"),
    FixKind.LOG_LESS: lambda p, fw: Fact(
        "framework.lightning.log_less",
        log_every_n_steps=LOG_EVERY,
        now_log_every_n_steps=fw.setting("log_every_n_steps") or LIGHTNING_LOG_EVERY,
    ),
    FixKind.NO_SYNC: lambda p, fw: Fact(
        "framework.lightning.accumulate", micro_batches=p.get("micro_batches", DEFAULT_MICRO_BATCHES)
    ),
}

TRANSFORMERS: dict[FixKind, Knob] = {
    FixKind.WORKERS: lambda p, fw: Fact(
        "framework.trainer.workers",
        num_workers=p.get("num_workers", DEFAULT_WORKERS),
        now_num_workers=fw.setting("dataloader_num_workers"),
    ),
    FixKind.PERSISTENT_WORKERS: lambda p, fw: Fact(
        "framework.trainer.persistent", now=fw.setting("dataloader_persistent_workers")
    ),
    FixKind.LOAD_IN_PROCESS: lambda p, fw: Fact("framework.trainer.load_in_process"),
    FixKind.BF16_AUTOCAST: lambda p, fw: Fact("framework.trainer.bf16"),
    FixKind.FP32: lambda p, fw: Fact("framework.trainer.fp32"),
    FixKind.COMPILE: lambda p, fw: Fact("framework.trainer.compile"),
    FixKind.LOG_LESS: lambda p, fw: Fact(
        "framework.trainer.log_less", logging_steps=LOG_EVERY, now_logging_steps=fw.setting("logging_steps")
    ),
    FixKind.NO_SYNC: lambda p, fw: Fact(
        "framework.trainer.accumulate", micro_batches=p.get("micro_batches", DEFAULT_MICRO_BATCHES)
    ),
}

KNOBS: dict[FrameworkName, dict[FixKind, Knob]] = {
    FrameworkName.LIGHTNING: LIGHTNING,
    FrameworkName.TRANSFORMERS: TRANSFORMERS,
}


def in_framework_terms(findings: Sequence[Finding], framework: Framework | None) -> tuple[Finding, ...]:
    """Each finding with `framework_fix` set where its fix has a knob in `framework`."""
    if framework is None:
        return tuple(findings)
    knobs = KNOBS.get(framework.name, {})
    out = []
    for f in findings:
        knob = knobs.get(f.fix_kind) if f.fix_kind is not None else None
        out.append(replace(f, framework_fix=knob(dict(f.fix_params), framework)) if knob else f)
    return tuple(out)
