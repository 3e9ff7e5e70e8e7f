"""A measured fix for steps that wait on a DataLoader loading in the training process: a few steps
with their batches loaded by worker processes.

Whether workers pay depends on this machine: on 2 cores they share the cores with the model's
intra-op threads; moving a batch between processes costs ~1 ms here whatever the fetch costs. A model
of it said ×1.05 for a CPU-bound `__getitem__` that `num_workers=2` ran ×1.82 faster, and a probe of
the transfer alone cannot see the cores. So, when the steps seen so far wait for data (`WAIT_MIN` of
the step, median) on a map-style dataset loaded with `num_workers=0`, pinchpoint takes the next
batches' indices from the program's own sampler and loads exactly those batches, in order, with a
`DataLoader(num_workers=K)` over the same dataset and collate function; the program's iterator
carries on after them. The workers are handed `PREFETCH × K` index batches more than they serve, so
that they keep working through the measured steps as a loader's workers do; those are given back to
the front of the program's sampler, unserved (their loading is the trial's cost). `WARM` steps (the
workers fork and fill their queues), then `STEPS` measured; the workers are shut down when their
batches are used. Those steps are marked `trial` and `worker_trial.json` says which were measured.

K: enough workers that each batch has the time of `K - 1` steps' compute to load (the wait, measured,
is the fetch), at least 2; at most the usable cores when the fetch computes (its CPU time is most of
its wall time), else `MAX_WORKERS` (a sleeping fetch needs no core). What differs for the program:
its workers' random draws (augmentations) come from the workers' seeds, as with any `num_workers`;
the main process's random stream is left as it was. Skipped for iterable datasets (their items
cannot be handed out twice or skipped), several ranks, and batches the program asked for from
another thread.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from pathlib import Path
from typing import Any

from pinchpoint.capture import loader_probe
from pinchpoint.capture.alloc_trial import ranks
from pinchpoint.capture.writer import write_json_atomic

WAIT_MIN = 0.10
"""Median share of the step spent waiting for data before workers are tried."""
MIN_SEEN = 4
WARM = 2
STEPS = 5
MAX_WORKERS = 8
PREFETCH = 2
"""The trial loader's prefetch_factor (torch's default): batches in flight per worker."""
CPU_BOUND = 0.5
"""A fetch on CPU at least half its wall time computes: its workers need cores."""
FILE = "worker_trial.json"


def workers_for(wait_ns: int, step_ns: int, fetch_cpu: float, cores: int) -> int:
    """Workers to try (see the module docstring)."""
    compute = max(1, step_ns - wait_ns)
    k = max(2, math.ceil(wait_ns / compute) + 1)
    cap = max(1, cores) if fetch_cpu >= CPU_BOUND else MAX_WORKERS
    return max(1, min(k, cap, MAX_WORKERS))


class WorkerTrialRunner:
    def __init__(self, rank_dir: Path) -> None:
        self.rank_dir = rank_dir
        self.state = "idle"  # idle -> running -> done
        self.seen: list[tuple[int, int, int]] = []
        """(step ns, data-wait ns, batches) of the steps at the program's own settings."""
        self.fetch_wall = 0
        self.fetch_cpu = 0
        self.it: Any = None
        """The program's latest iterator loading in this process."""
        self.trial_it: Any = None
        self.workers = 0
        self.complete = False
        self.first = 0
        self.indices: list[Any] = []
        self.served = 0
        self.to_serve = 0
        self.failed = False

    # ---- what the hooks report ---------------------------------------------------------------

    def note_fetch(self, wall_ns: int, cpu_ns: int) -> None:
        if self.state == "idle":
            self.fetch_wall += max(0, wall_ns)
            self.fetch_cpu += max(0, cpu_ns)

    def observe(self, index: int, step_ns: int, wait_ns: int, batches: int, own_settings: bool) -> None:
        if self.state == "idle" and own_settings and index > 0:
            self.seen.append((step_ns, wait_ns, batches))

    def next_batch(self, it: Any, orig_next: Any) -> Any:
        """The program's `next(it)`: from the trial's workers while they have batches for it. Before
        the trial, the iterator of the latest batch is the one tried (a training step's, not the
        evaluation loader's that ran before it)."""
        if self.state == "idle":
            self.it = it if getattr(it, "_num_workers", 1) == 0 else None
        elif self.trial_it is not None and it is self.it:
            if self.served >= self.to_serve:
                self._give_back(it)  # the trial's batches are used: the program loads its own again
                return orig_next(it)
            try:
                batch = orig_next(self.trial_it)
                self.served += 1
                return batch
            except StopIteration:
                self._give_back(it)
            except Exception:
                # A worker died or the dataset cannot be loaded in one (a file handle that does not
                # survive fork): the batches it had not served go back to the program's own loading.
                self._give_back(it)
                self.failed = True
        return orig_next(it)

    # ---- the trial ---------------------------------------------------------------------------

    def on_step_end(self, torch: Any, next_step: int, ready: bool) -> bool:
        """At the boundary before `next_step` (`ready`: the other trials are over): whether
        `next_step` is a trial step."""
        if self.state == "done":
            return False
        if self.state == "idle":
            if not ready or len(self.seen) < MIN_SEEN:
                return False
            self.state = "done"
            with contextlib.suppress(Exception):
                if self._start(torch):
                    self.first, self.state = next_step, "running"
                    return True
            self._shutdown()
            return False
        if next_step < self.first + WARM + STEPS:
            return True
        if self.it is not None:
            self._give_back(self.it)
        self.state = "done"
        if self.failed:
            return True
        with contextlib.suppress(OSError):
            write_json_atomic(
                self.rank_dir / FILE,
                {
                    "workers": self.workers,
                    "steps": list(range(self.first + WARM, self.first + WARM + STEPS)),
                    "batches": self.served,
                    "complete": self.complete,
                },
            )
        return True  # (the step after: back in the process, whatever the workers left)

    def _start(self, torch: Any) -> bool:
        it = self.it
        if it is None or ranks() > 1:
            return False
        steps = sorted(s for s, _, _ in self.seen)
        waits = sorted(w for _, w, _ in self.seen)
        step_ns, wait_ns = steps[len(steps) // 2], waits[len(waits) // 2]
        if step_ns <= 0 or wait_ns < WAIT_MIN * step_ns:
            return False
        dataset = getattr(it, "_dataset", None)
        if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset):
            return False
        per_step = max(1, sorted(b for _, _, b in self.seen)[len(self.seen) // 2])
        fetch_cpu = self.fetch_cpu / self.fetch_wall if self.fetch_wall else 1.0
        self.workers = workers_for(wait_ns, step_ns, fetch_cpu, len(os.sched_getaffinity(0)))
        # Batches beyond the ones served, so that the workers keep working through the measured
        # steps as a loader's do (one new batch asked for per batch taken): with exactly the served
        # ones, the workers finished early and the last steps ran without their competition for the
        # cores (×1.31 in a trial, ×0.93 for the whole run with two workers). Not served: given back.
        self.to_serve = (WARM + STEPS) * per_step
        wanted = self.to_serve + PREFETCH * self.workers
        indices = list(itertools.islice(it._sampler_iter, wanted))
        if not indices:
            return False
        try:
            self.trial_it = self._workers_iter(torch, it, dataset, indices)
        except Exception:
            it._sampler_iter = itertools.chain(indices, it._sampler_iter)  # the program's batches, back
            raise
        self.indices, self.complete = indices, len(indices) == wanted
        return True

    def _workers_iter(self, torch: Any, it: Any, dataset: Any, indices: list[Any]) -> Any:
        """An iterator of `self.workers` workers over exactly the batches of `indices`."""
        auto = bool(getattr(it, "_auto_collation", True))
        options: dict[str, Any] = {
            "num_workers": self.workers,
            "collate_fn": it._collate_fn,
            "pin_memory": bool(getattr(it, "_pin_memory", False)),
            "timeout": getattr(it, "_timeout", 0) or 0,
            "multiprocessing_context": "fork",
            "prefetch_factor": PREFETCH,
        }
        if auto:
            options["batch_sampler"] = indices
        else:
            options.update(sampler=indices, batch_size=None)
        loader = torch.utils.data.DataLoader(dataset, **options)
        rng = torch.random.get_rng_state()  # an iterator draws its workers' base seed: keep the program's
        loader_probe.ACTIVE = True  # (the forked workers record nothing: their batches are the trial's)
        try:
            return iter(loader)
        finally:
            loader_probe.ACTIVE = False
            torch.random.set_rng_state(rng)

    def _give_back(self, it: Any) -> None:
        """Stop the workers; the index batches they did not serve (the prefetched ones) go back to the
        front of the program's sampler."""
        self._shutdown()
        rest, self.indices = self.indices[self.served :], []
        if rest:
            it._sampler_iter = itertools.chain(rest, it._sampler_iter)

    def _shutdown(self) -> None:
        trial_it, self.trial_it = self.trial_it, None
        if trial_it is not None:
            with contextlib.suppress(Exception):
                trial_it._shutdown_workers()

    def restore(self) -> None:
        """Workers stopped when the program ends mid-trial."""
        self.state = "done"
        if self.it is not None and self.trial_it is not None:
            self._give_back(self.it)
        self._shutdown()
