"""What each process of a run is, in words, for charts and stack views."""

from __future__ import annotations

from pinchpoint.trace.run import Run


def process_names(run: Run) -> dict[int, str]:
    """pid -> what the process is (training process, DataLoader worker), for the stack views."""
    names: dict[int, str] = {}
    for r in run.ranks:
        rank = f"rank {r.rank} " if len(run.ranks) > 1 else ""
        for c in r.loaders:
            for i, pid in enumerate(c.worker_pids):
                names[pid] = f"{rank}DataLoader worker {i} (pid {pid})"
        if r.main is not None:
            names[r.main.pid] = f"{rank}training process (pid {r.main.pid})"
    return names
