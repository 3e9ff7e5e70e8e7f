"""A `pinchpoint.profile()` in a Jupyter notebook: the cell that ends with the profile object shows the
report as HTML. The notebook runs in a real IPython kernel (ipykernel, driven by nbclient), which asks
the object for its `text/html` form the way Jupyter and VS Code do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import nbclient
    import nbformat
except ImportError:  # the dev extra installs them; CI must not skip this
    if os.environ.get("CI"):
        raise
    pytest.skip("nbclient/nbformat not installed", allow_module_level=True)

SETUP = """
import time
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
import pinchpoint

class Slow(Dataset):  # every sample costs 3 ms of waiting (a slow disk): the loader holds training back
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(64), torch.randint(0, 4, ()).item()

model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Slow(), batch_size=8)
"""

PROFILE = """
with pinchpoint.profile(out={out!r}, print_report=False) as prof:
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == 40:
            break
"""


def test_the_profile_shows_its_report_as_html_in_a_notebook(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(SETUP),
        nbformat.v4.new_code_cell(PROFILE.format(out=str(tmp_path / "run"))),
        nbformat.v4.new_code_cell("prof"),
    ]
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = nb.cells[2].outputs
    (result,) = [o for o in outputs if o.output_type == "execute_result"]
    html = result.data["text/html"]
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html.lower()
    assert 'class="finding' in html and "[input.fetch]" in html  # the planted wait, named
    assert 'data-chart="steps"' in html
