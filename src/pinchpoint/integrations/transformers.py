"""`TransformersCallback`: a step is one optimizer step of the `Trainer`'s (`state.global_step`)."""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from pinchpoint.capture import frameworks
from pinchpoint.integrations._session import Session


class TransformersCallback(TrainerCallback):
    """Marks a transformers `Trainer`'s steps for pinchpoint (see `pinchpoint.integrations`). Keyword
    arguments go to `pinchpoint.profile()` when the program runs without `pinchpoint run`."""

    def __init__(self, **profile_options: Any) -> None:
        self.session = Session(**profile_options)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.begin(frameworks.transformers_record(args))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # on_step_end fires once per optimizer step, after the gradient-accumulation micro-batches.
        self.session.step("train")

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session.agent is not None:
            self.session.step("eval")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.session.end()
