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

__all__ = ["PinchpointError", "__version__", "profile"]

from pinchpoint._version import __version__
from pinchpoint.errors import PinchpointError

if TYPE_CHECKING:
    from pinchpoint.notebook import Profile


def profile(out: str | None = None, **kwargs: Any) -> Profile:
    """Profile the code in a `with` block; see `pinchpoint.notebook.Profile`."""
    from pinchpoint.notebook import Profile

    return Profile(out=out, **kwargs)
