"""Where `pinchpoint calibrate`'s cache of measured ceilings lives and how it is keyed: the contract
between the command that writes it (`capture/calibrate.py`) and the readers (`ingest/ceilings.py`).

Kept under the pinchpoint home (``$PINCHPOINT_HOME``, else ``$XDG_CACHE_HOME/pinchpoint``, else
``~/.cache/pinchpoint``), keyed by the CPU model, core count, torch version and GPU names, so a
different machine or torch build never reuses another's numbers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

SCHEMA = "pinchpoint.ceilings/1"


def home_dir() -> Path:
    explicit = os.environ.get("PINCHPOINT_HOME")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pinchpoint"


def machine_key(
    cpu_model: str | None, logical_cores: int | None, torch_version: str | None, gpu_names: Sequence[str]
) -> str:
    """A short stable id of (CPU model, logical cores, torch version, GPU names)."""
    text = json.dumps([cpu_model, logical_cores, torch_version, [str(g) for g in gpu_names]])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cache_path(key: str) -> Path:
    return home_dir() / "ceilings" / f"{key}.json"
