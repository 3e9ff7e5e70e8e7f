"""The loader probe on a real program (examples/input_tiny_batches.py): a training loop that fetches
small in-memory batches in its own process is not told to add DataLoader workers when moving a batch
between processes costs more than fetching it (here ~1 ms against ~0.13 ms; with one worker the loop
ran x0.26 as fast, examples/TRUTH.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pinchpoint.capture.loader_probe import batch_spec

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "input_tiny_batches.py"


def test_cheap_fetches_are_not_sent_to_workers(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(out), "--json", str(tmp_path / "r.json"), str(EXAMPLE)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0 and "median_step_ms=" in res.stdout, res.stderr[-3000:]
    rank = out / "ranks" / "rank0"
    probe = json.loads((rank / "probes.json").read_text())["loader_transfer"]
    assert probe["batch_bytes"] == 32 * 256 * 4 + 32 * 8 and probe["tensors"] == 2, probe
    assert probe["worker_ns"] > 0 and probe["receive_ns"] > 0, probe
    # the probe's own worker and batches left nothing behind: one fetch file, one process file and one
    # DataLoader, the program's (its random stream is untouched: test_cli_run's unchanged results)
    assert len(list(rank.glob("fetch-*.jsonl"))) == 1 and len(list(rank.glob("process-*.json"))) == 1
    loaders = [json.loads(x) for x in (rank / "loaders.jsonl").read_text().splitlines()]
    assert [(x["num_workers"], x["batch_size"]) for x in loaders] == [(0, 32)], loaders
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["environment"]["dataloader"]["num_workers"] == 0
    (finding,) = [f for f in report["findings"] if f["id"] == "input.preprocess"]
    text = " ".join(finding["evidence"])
    assert "(4 batches a step)" in text and "would pass each batch (33 kB) through shared memory" in text, (
        text
    )
    predicted = float(text.split("More workers: predicted ×")[1].split(" ")[0])
    assert predicted < 1.0, text
    assert finding["fix"].startswith("Keep num_workers=0"), finding["fix"]
    assert "BatchSampler(" in finding["snippet"]
    # the whole-batch fetch is priced from the probe (examples/TRUTH.md: x1.28 measured)
    assert "Fetched as whole batches" in text and finding["estimated_speedup"] > 1.0, text


def test_batch_spec_walks_nested_batches() -> None:
    import torch

    batch = {"x": torch.zeros(4, 3), "meta": [torch.zeros(4, dtype=torch.int64), "label"], "n": 3}
    assert batch_spec(batch) == [([4, 3], "float32"), ([4], "int64")]
    assert batch_spec(("not", "tensors")) == []
