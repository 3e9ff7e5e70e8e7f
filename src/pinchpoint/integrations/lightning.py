"""`LightningCallback`: a step is one optimizer step of Lightning's (`trainer.global_step`)."""

from __future__ import annotations

from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package
    from pytorch_lightning import Callback  # type: ignore[assignment]

from pinchpoint.capture import frameworks
from pinchpoint.integrations._session import Session


class LightningCallback(Callback):
    """Marks Lightning's steps for pinchpoint (see `pinchpoint.integrations`). Keyword arguments go to
    `pinchpoint.profile()` when the program runs without `pinchpoint run`."""

    def __init__(self, **profile_options: Any) -> None:
        super().__init__()
        self.session = Session(**profile_options)
        self.last_global_step = 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.session.begin(frameworks.describe(trainer))
        self.last_global_step = int(trainer.global_step)

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # With gradient accumulation a batch is a micro-batch: the step ends when the optimizer stepped.
        if int(trainer.global_step) != self.last_global_step:
            self.last_global_step = int(trainer.global_step)
            self.session.step("train")

    def on_validation_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.session.agent is not None:
            self.session.step("eval")

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.session.end()
