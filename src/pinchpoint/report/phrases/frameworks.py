"""Fixes in a framework's own knobs (diagnosis/frameworks.py) in words: Lightning and transformers'
`Trainer`."""

from __future__ import annotations

from collections.abc import Callable

PHRASES: dict[str, Callable[..., str]] = {
    "framework.lightning.workers": lambda num_workers: (
        f"In Lightning: return `DataLoader(..., num_workers={num_workers}, persistent_workers=True)` from your "
        "LightningDataModule's `train_dataloader()`"
    ),
    "framework.lightning.persistent": lambda: (
        "In Lightning: `train_dataloader()` returns `DataLoader(..., persistent_workers=True)` (Lightning "
        "warns about this one too)"
    ),
    "framework.lightning.load_in_process": lambda: (
        "In Lightning: `train_dataloader()` returns `DataLoader(dataset, sampler=BatchSampler(...), "
        "batch_size=None, num_workers=0)` (the dataset indexes a whole batch at once)"
    ),
    "framework.lightning.bf16": lambda precision: (
        f'In Lightning: `L.Trainer(precision="bf16-mixed")` (now {precision})'
    ),
    "framework.lightning.fp32": lambda precision: (
        f'In Lightning: `L.Trainer(precision="32-true")` on this machine (now {precision})'
    ),
    "framework.lightning.compile": lambda: (
        "In Lightning: `model = torch.compile(model)` before `trainer.fit(model)`"
    ),
    "framework.lightning.log_less": lambda log_every_n_steps, now_log_every_n_steps: (
        f"In Lightning: `L.Trainer(log_every_n_steps={log_every_n_steps})` (now {now_log_every_n_steps}), "
        "`self.log(..., on_step=False, on_epoch=True)`, and no per-step `.item()` in `training_step` or callbacks"
    ),
    "framework.lightning.accumulate": lambda micro_batches: (
        f"In Lightning: `L.Trainer(accumulate_grad_batches={micro_batches})` accumulates without all-reducing "
        "until the last micro-batch (it uses `no_sync()` for you)"
    ),
    "framework.trainer.workers": lambda num_workers, now_num_workers: (
        f"In the Trainer: `TrainingArguments(dataloader_num_workers={num_workers}, "
        f"dataloader_persistent_workers=True)` (now dataloader_num_workers={now_num_workers})"
    ),
    "framework.trainer.persistent": lambda now: (
        f"In the Trainer: `TrainingArguments(dataloader_persistent_workers=True)` (now {now})"
    ),
    "framework.trainer.load_in_process": lambda: (
        "In the Trainer: `TrainingArguments(dataloader_num_workers=0)`, and a dataset whose `__getitems__` "
        "indexes a whole batch at once"
    ),
    "framework.trainer.bf16": lambda: "In the Trainer: `TrainingArguments(bf16=True)`",
    "framework.trainer.fp32": lambda: "In the Trainer: `TrainingArguments(bf16=False)` on this machine",
    "framework.trainer.compile": lambda: "In the Trainer: `TrainingArguments(torch_compile=True)`",
    "framework.trainer.log_less": lambda logging_steps, now_logging_steps: (
        f"In the Trainer: `TrainingArguments(logging_steps={logging_steps})` (now {now_logging_steps}), and no "
        "per-step work in callbacks (`on_step_end`) or `compute_loss`"
    ),
    "framework.trainer.accumulate": lambda micro_batches: (
        f"In the Trainer: `TrainingArguments(gradient_accumulation_steps={micro_batches})` "
        "(it skips the all-reduce until the last micro-batch)"
    ),
}
