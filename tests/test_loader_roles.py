"""Every DataLoader is known by where the program built it, and a finding reads the one that feeds the
steps: a training loader (num_workers=0, batch 32) and an evaluation loader (batch 100) built and run
every 15 steps, as a language model's script did when the report spoke of the evaluation loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from programs import run_program

PROGRAM = """
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.randn(64), i % 10


def main():
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    train = DataLoader(Slow(), batch_size=32, shuffle=True)  # TRAIN LOADER
    steps = 0
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if steps % 15 == 0:
            model.eval()
            with torch.no_grad():
                for k, (ex, ey) in enumerate(DataLoader(Slow(), batch_size=100)):  # EVAL LOADER
                    model(ex)
                    if k == 2:
                        break
            model.train()
        if steps == 60:
            break
    print(f"steps={steps}")


main()
"""


@pytest.mark.e2e
def test_the_loader_that_feeds_the_steps_is_the_one_reported(tmp_path: Path) -> None:
    script = tmp_path / "train_and_eval.py"
    script.write_text(PROGRAM)
    lines = PROGRAM.splitlines()
    train_line = next(i for i, ln in enumerate(lines, 1) if "TRAIN LOADER" in ln)
    eval_line = next(i for i, ln in enumerate(lines, 1) if "EVAL LOADER" in ln)
    _, out, _ = run_program(script, tmp_path)
    report = json.loads((out / "report.json").read_text())
    env = report["environment"]
    assert env["dataloader"]["batch_size"] == 32 and env["dataloader"]["site"].endswith(f":{train_line}")
    loaders = {d["site"].rsplit(":", 1)[1]: d for d in env["dataloaders"]}
    assert set(loaders) == {str(train_line), str(eval_line)}
    assert loaders[str(train_line)]["feeds_steps"] and loaders[str(train_line)]["iterators"] == 1
    assert not loaders[str(eval_line)]["feeds_steps"] and loaders[str(eval_line)]["iterators"] == 4
    assert loaders[str(eval_line)]["batch_size"] == 100
    settings = [e for f in report["findings"] for e in f["evidence"] if e.startswith("DataLoader settings")]
    assert settings and all("batch_size=32" in e and f":{train_line}, which feeds" in e for e in settings), (
        settings
    )


def test_the_feeding_loader_is_the_one_most_steps_name_else_the_last_built() -> None:
    from dataclasses import replace

    from conftest import make_steps
    from pinchpoint.analysis.loader import feeding_loader
    from pinchpoint.trace.run import LoaderConfig, RankData

    def config(serial: int | None, batch: int) -> LoaderConfig:
        return LoaderConfig(t_ns=serial or 0, num_workers=0, pin_memory=False, prefetch_factor=None,
                            persistent_workers=False, batch_size=batch, dataset="D", serial=serial)  # fmt: skip

    train, evaluation = config(0, 32), config(1, 100)
    steps = tuple(replace(s, loader=0) for s in make_steps(20, {"forward": 5}))
    assert feeding_loader(RankData(rank=0, steps=steps, loaders=(train, evaluation))) is train
    older = tuple(replace(s, loader=None) for s in steps)  # a run directory from before steps said
    assert feeding_loader(RankData(rank=0, steps=older, loaders=(train, evaluation))) is evaluation
    assert feeding_loader(RankData(rank=0, steps=steps)) is None


EPOCHS = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(640, 64), torch.randint(0, 10, (640,)))
loader = DataLoader(ds, batch_size=64, num_workers=2)  # workers started again every epoch
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 0
for epoch in range(8):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
print(f"steps={steps}")
"""


@pytest.mark.e2e
def test_workers_started_again_every_epoch_are_a_named_stall(tmp_path: Path) -> None:
    """Ten 2 ms steps an epoch, and each epoch's first waits ~50 ms for two new worker processes
    (persistent_workers=True measured 0.50 -> 0.19 s for the 80 steps here, idle)."""
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS)
    _, out, _ = run_program(script, tmp_path)
    notes = json.loads((out / "report.json").read_text())["notes"]
    (stall,) = [n for n in notes if "steps stall" in n]
    assert "new DataLoader iterator" in stall, stall  # (the period too, when no other slow step breaks it)
    assert "persistent_workers=True" in stall, stall
