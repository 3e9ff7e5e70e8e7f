"""DataLoader workers started again with every iterator: what each epoch's first step pays for it.

Without `persistent_workers=True` a DataLoader's worker processes exit when its iterator ends (an
epoch) and the next iterator starts new ones; each then pays its start-up, and whatever the dataset
opens on first use, before its first batch. The cost falls on the first step each iterator feeds, so
the steps' median never holds it: it is read here as those first steps against the others the same
loader fed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from pinchpoint.analysis.loader import feeding_loader
from pinchpoint.trace.run import RankData, Step

ITERATORS_MIN = 3
"""Iterators of the training loader (epochs) before the restarts count: two restarts at least."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRestarts:
    site: str | None
    """file:line where the program built the loader."""
    workers: int
    iterators: int
    first_ns: int
    """An iterator's first step, after the first iterator (median)."""
    other_ns: int
    """The other steps those iterators fed (median)."""
    saved_ns: int
    """What persistent workers would save: each later iterator's first step beyond `other_ns`."""
    steps: int
    steps_ns: int
    """Every whole step the loader's iterators fed, and their time."""

    @property
    def share(self) -> float:
        return self.saved_ns / max(1, self.steps_ns)


def worker_restarts(rank: RankData) -> WorkerRestarts | None:
    """The training loader's restarts, when it has workers that do not persist and made
    `ITERATORS_MIN` iterators or more; else None."""
    feeding = feeding_loader(rank)
    if feeding is None or feeding.num_workers <= 0 or feeding.persistent_workers:
        return None
    serials = [
        c.serial
        for c in sorted(rank.loaders, key=lambda c: c.t_ns)
        if c.serial is not None and c.site == feeding.site and c.dataset == feeding.dataset
    ]
    by_serial: dict[int, list[Step]] = {}
    ours = set(serials)
    for s in sorted(rank.steps, key=lambda s: s.index):
        if s.loader in ours and not s.partial and s.dur_ns > 0:
            by_serial.setdefault(s.loader, []).append(s)
    fed = [by_serial[k] for k in serials if by_serial.get(k)]
    if len(fed) < ITERATORS_MIN:
        return None
    firsts = [steps[0] for steps in fed[1:] if _plain(steps[0])]
    others = [s.dur_ns for steps in fed for s in steps[1:] if _plain(s)]
    if not firsts or not others:
        return None
    other = int(statistics.median(others))
    every = [s for steps in fed for s in steps]
    return WorkerRestarts(
        site=feeding.site,
        workers=feeding.num_workers,
        iterators=len(fed),
        first_ns=int(statistics.median(s.dur_ns for s in firsts)),
        other_ns=other,
        saved_ns=sum(max(0, s.dur_ns - other) for s in firsts) * (len(fed) - 1) // len(firsts),
        steps=len(every),
        steps_ns=sum(s.dur_ns for s in every),
    )


def _plain(step: Step) -> bool:
    """A step the program ran as it is (not the op window's or a trial's)."""
    return not (step.profiled or step.trial)
