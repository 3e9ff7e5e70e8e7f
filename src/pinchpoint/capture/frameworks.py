"""Which training framework drives the loop, and the settings a fix would name.

Found once, at the first step's end, from the running stack: a Lightning `Trainer` (`lightning` or
`pytorch_lightning`) or a transformers `Trainer` is `self` in one of the frames around the step. The
integrations' callbacks (`pinchpoint.integrations`) record the same from their own hooks. The result
goes to process-{pid}.json as `framework`:

    {"name": "lightning", "version": "2.6.6", "settings": {"precision": "32-true",
     "accumulate_grad_batches": 1, "strategy": "SingleDeviceStrategy", "devices": 1}, "via": "stack"}

Nothing here imports a framework; it reads objects the program already made, and never raises.
"""

from __future__ import annotations

import contextlib
import sys
from types import FrameType
from typing import Any

MAX_FRAMES = 80
LIGHTNING_MODULES = ("lightning.pytorch.trainer", "pytorch_lightning.trainer")
TRANSFORMERS_MODULES = ("transformers.trainer",)


def detect(frame: FrameType | None) -> dict[str, Any] | None:
    """The framework whose Trainer is `self` in a frame at or above `frame`, with its settings."""
    depth = 0
    while frame is not None and depth < MAX_FRAMES:
        obj = frame.f_locals.get("self")
        if obj is not None:
            found = describe(obj)
            if found is not None:
                return found | {"via": "stack"}
        frame = frame.f_back
        depth += 1
    return None


def describe(trainer: Any) -> dict[str, Any] | None:
    """`trainer` as a framework record, or None when it is neither framework's Trainer."""
    with contextlib.suppress(Exception):
        # The program's own subclass counts (`class MyTrainer(Trainer)`, as many fine-tunes write).
        for cls in type(trainer).__mro__:
            module = cls.__module__ or ""
            if module.startswith(LIGHTNING_MODULES) and cls.__name__ == "Trainer":
                return {
                    "name": "lightning",
                    "version": _version(module),
                    "settings": lightning_settings(trainer),
                }
            if module.startswith(TRANSFORMERS_MODULES) and cls.__name__ == "Trainer":
                return transformers_record(trainer.args)
    return None


def lightning_settings(trainer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, get in (
        ("precision", lambda: str(trainer.precision)),
        ("accumulate_grad_batches", lambda: int(trainer.accumulate_grad_batches)),
        ("strategy", lambda: type(trainer.strategy).__name__),
        ("accelerator", lambda: type(trainer.accelerator).__name__),
        ("devices", lambda: int(trainer.num_devices)),
        ("log_every_n_steps", lambda: int(trainer.log_every_n_steps)),
        ("automatic_optimization", lambda: bool(trainer.lightning_module.automatic_optimization)),
    ):
        with contextlib.suppress(Exception):
            out[key] = get()
    return out


TRAINER_ARGS = (
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "bf16",
    "fp16",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "torch_compile",
    "logging_steps",
    "eval_strategy",
    "eval_steps",
    "optim",
)
"""The `TrainingArguments` a diagnosis may name."""


def transformers_record(args: Any) -> dict[str, Any]:
    """A transformers Trainer's record, from its `TrainingArguments`."""
    return {"name": "transformers", "version": _version("transformers"), "settings": trainer_settings(args)}


def trainer_settings(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in TRAINER_ARGS:
        with contextlib.suppress(Exception):
            value = getattr(args, key)
            out[key] = value if isinstance(value, (bool, int, float, str)) or value is None else str(value)
    return out


def _version(module: str) -> str | None:
    top = module.split(".", 1)[0]
    return str(getattr(sys.modules.get(top), "__version__", None) or "") or None
