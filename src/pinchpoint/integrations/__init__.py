"""Callbacks that mark steps exactly inside the training frameworks people use.

    import lightning as L
    from pinchpoint.integrations import LightningCallback
    L.Trainer(callbacks=[LightningCallback()]).fit(model, datamodule=dm)

    from transformers import Trainer
    from pinchpoint.integrations import TransformersCallback
    Trainer(model=model, args=args, train_dataset=ds, callbacks=[TransformersCallback()]).train()

Under `pinchpoint run` they join its capture: a step is then exactly one optimizer step of the
framework's (`trainer.global_step` / `state.global_step`), evaluation batches are eval steps, and the
framework's settings (precision, gradient accumulation, workers, compile, strategy) are recorded for
the diagnosis to name. Run plainly (`python train.py`), the callback profiles training itself, as
`pinchpoint.profile()` would, and prints the report when training ends. `pinchpoint run` finds steps
without them too; with them the steps are the framework's own.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LightningCallback", "TransformersCallback"]


def __getattr__(name: str) -> Any:
    # Each import needs its framework installed; neither is imported until asked for.
    if name == "LightningCallback":
        from pinchpoint.integrations.lightning import LightningCallback

        return LightningCallback
    if name == "TransformersCallback":
        from pinchpoint.integrations.transformers import TransformersCallback

        return TransformersCallback
    raise AttributeError(f"module 'pinchpoint.integrations' has no attribute {name!r}")
