"""Fixes in the words of the framework the program runs under: the knob a Lightning or transformers
`Trainer` user actually has (`L.Trainer(precision="bf16-mixed")`, `TrainingArguments(bf16=True)`),
found from the finding's `fix_kind` and `fix_params`, never from its prose. The plain-PyTorch fix
stays beside it for code the framework does not own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from pinchpoint.diagnosis.finding import Finding, FixKind
from pinchpoint.trace.run import Framework, FrameworkName

Phrase = Callable[[dict[str, int], Framework], str]


def _lightning_workers(p: dict[str, int], fw: Framework) -> str:
    n = p.get("num_workers", 2)
    return (
        f"In Lightning: return `DataLoader(..., num_workers={n}, persistent_workers=True)` from your "
        "LightningDataModule's `train_dataloader()`"
    )


def _lightning_accumulate(p: dict[str, int], fw: Framework) -> str:
    n = p.get("micro_batches", 2)
    return (
        f"In Lightning: `L.Trainer(accumulate_grad_batches={n})` accumulates without all-reducing until the "
        "last micro-batch (it uses `no_sync()` for you)"
    )


LIGHTNING: dict[FixKind, Phrase] = {
    FixKind.WORKERS: _lightning_workers,
    FixKind.LOAD_IN_PROCESS: lambda p, fw: (
        "In Lightning: `train_dataloader()` returns `DataLoader(dataset, sampler=BatchSampler(...), "
        "batch_size=None, num_workers=0)` (the dataset indexes a whole batch at once)"
    ),
    FixKind.BF16_AUTOCAST: lambda p, fw: (
        f"In Lightning: `L.Trainer(precision=\"bf16-mixed\")` (now {fw.setting('precision') or '32-true'})"
    ),
    FixKind.FP32: lambda p, fw: (
        f"In Lightning: `L.Trainer(precision=\"32-true\")` on this machine (now {fw.setting('precision')})"
    ),
    FixKind.COMPILE: lambda p, fw: "In Lightning: `model = torch.compile(model)` before `trainer.fit(model)`",
    FixKind.LOG_LESS: lambda p, fw: (
        f"In Lightning: `L.Trainer(log_every_n_steps=50)` (now {fw.setting('log_every_n_steps') or 50}), "
        "`self.log(..., on_step=False, on_epoch=True)`, and no per-step `.item()` in `training_step` or callbacks"
    ),
    FixKind.NO_SYNC: _lightning_accumulate,
}


def _trainer_workers(p: dict[str, int], fw: Framework) -> str:
    n = p.get("num_workers", 2)
    return (
        f"In the Trainer: `TrainingArguments(dataloader_num_workers={n}, dataloader_persistent_workers=True)` "
        f"(now dataloader_num_workers={fw.setting('dataloader_num_workers')})"
    )


TRANSFORMERS: dict[FixKind, Phrase] = {
    FixKind.WORKERS: _trainer_workers,
    FixKind.LOAD_IN_PROCESS: lambda p, fw: (
        "In the Trainer: `TrainingArguments(dataloader_num_workers=0)`, and a dataset whose `__getitems__` "
        "indexes a whole batch at once"
    ),
    FixKind.BF16_AUTOCAST: lambda p, fw: "In the Trainer: `TrainingArguments(bf16=True)`",
    FixKind.FP32: lambda p, fw: "In the Trainer: `TrainingArguments(bf16=False)` on this machine",
    FixKind.COMPILE: lambda p, fw: "In the Trainer: `TrainingArguments(torch_compile=True)`",
    FixKind.LOG_LESS: lambda p, fw: (
        f"In the Trainer: `TrainingArguments(logging_steps=50)` (now {fw.setting('logging_steps')}), and no "
        "per-step work in callbacks (`on_step_end`) or `compute_loss`"
    ),
    FixKind.NO_SYNC: lambda p, fw: (
        f"In the Trainer: `TrainingArguments(gradient_accumulation_steps={p.get('micro_batches', 2)})` "
        "(it skips the all-reduce until the last micro-batch)"
    ),
}

PHRASES: dict[FrameworkName, dict[FixKind, Phrase]] = {
    FrameworkName.LIGHTNING: LIGHTNING,
    FrameworkName.TRANSFORMERS: TRANSFORMERS,
}


def in_framework_terms(findings: Sequence[Finding], framework: Framework | None) -> tuple[Finding, ...]:
    """Each finding with `framework_fix` set where its fix has a knob in `framework`."""
    if framework is None:
        return tuple(findings)
    phrases = PHRASES.get(framework.name, {})
    out = []
    for f in findings:
        phrase = phrases.get(f.fix_kind) if f.fix_kind is not None else None
        out.append(replace(f, framework_fix=phrase(dict(f.fix_params), framework)) if phrase else f)
    return tuple(out)
