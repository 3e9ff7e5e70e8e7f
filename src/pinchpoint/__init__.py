"""pinchpoint: finds what limits a PyTorch program's speed and says what to change.

Command line: `pinchpoint run train.py`, `pinchpoint report RUN_DIR`.
In code::

    import pinchpoint
    with pinchpoint.profile(out="runs/exp1") as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    print(prof.report.findings[0].title)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["PinchpointError", "__version__", "profile"]

from pinchpoint.errors import PinchpointError

if TYPE_CHECKING:
    from pinchpoint.capture.api import Profile


def profile(out: str | None = None, **kwargs: Any) -> Profile:
    """Profile the code in a `with` block; see `pinchpoint.capture.api.Profile`."""
    from pinchpoint.capture.api import Profile

    return Profile(out=out, **kwargs)
