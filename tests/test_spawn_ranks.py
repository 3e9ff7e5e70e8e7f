"""`torch.multiprocessing.spawn` programs: every spawned rank gets its own folder and steps; the process
that spawned them is recorded as the launcher, not as rank 0."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

PROGRAM = textwrap.dedent(
    """
    import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    def worker(rank, world, store):
        dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
        torch.set_num_threads(1)
        model = DistributedDataParallel(nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(30):
            if rank == 1:
                time.sleep(0.02)  # rank 1 is late every step
            loss = model(torch.randn(32, 128)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.destroy_process_group()
        time.sleep(0.05)  # gloo's worker frees the last collective with the GIL: let it (see examples/ddp_straggler.py)

    if __name__ == "__main__":
        mp.spawn(worker, args=(2, sys.argv[1]), nprocs=2)
        print("done", flush=True)
    """
)


def test_spawned_ranks_are_captured_as_ranks(tmp_path: Path) -> None:
    script = tmp_path / "spawned.py"
    script.write_text(PROGRAM)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-o", str(out), "--json", str(tmp_path / "r.json"),
         str(script), str(tmp_path / "store")],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "done" in proc.stdout
    roles: dict[int, list[str]] = {}
    for rank in (0, 1):
        d = out / "ranks" / f"rank{rank}"
        steps = [json.loads(x) for x in (d / "steps.jsonl").read_text().splitlines()]
        assert len([s for s in steps if s["kind"] == "train"]) >= 29, (rank, len(steps))
        roles[rank] = sorted(json.loads(p.read_text())["role"] for p in d.glob("process-*.json"))
    assert roles == {0: ["launcher", "main"], 1: ["main"]}, roles
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["run"]["world_size"] == 2
    top = report["findings"][0]
    assert top["id"] == "imbalance.straggler" and top["ranks"] == [1], top
