"""examples/serve_one_at_a_time.py (FastAPI + uvicorn, a transformer encoder answering one request a
model call) under `pinchpoint run --load`, with the load its truth was measured under (`TRUTH_LOAD`): the
report holds latency percentiles, throughput and each call's batch, names serve.batching first, and
prices it within 25% of the throughput its own `--fix` (a batching queue) measured (examples/TRUTH.md).
Also examples/serve_generate.py, a generation server streaming a token an event with no KV cache."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from programs import EXAMPLES, beside_load
from truth import acceptable_tops, machine_truth, measured_causes, missing_row

pytestmark = pytest.mark.e2e

REAL_SHARE = 0.15
"""A fix that removed less of the request's time than this is not a real cause (as the examples' test)."""

EXAMPLE = EXAMPLES / "serve_one_at_a_time.py"
TOLERANCE = 0.25
"""The issue's bar: the estimate within 25% of the measured fix."""


def _plan() -> dict[str, str]:
    m = re.search(r'^TRUTH_LOAD = "([^"]+)"', EXAMPLE.read_text(), re.M)
    assert m is not None
    return dict(w.split("=", 1) for w in m.group(1).split())


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_server_answering_one_request_a_call_is_told_to_batch(tmp_path: Path) -> None:
    plan, port, out = _plan(), _port(), tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-o", str(out), "--no-color",
         "--load", f"http://127.0.0.1:{port}{plan['path']}", "--load-rate", plan["rate"],
         "--load-duration", plan["duration"], "--load-body", str(EXAMPLES / plan["body"]),
         "--", sys.executable, str(EXAMPLE), "--port", str(port)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(meta["child_pid"], 0)  # stopped after its load (and reaped)
    report = json.loads((out / "report.json").read_text())
    serving = report["serving"]
    calls = serving["model_calls"]
    assert serving["ok"] > 0 and serving["latency"]["p90_ms"] >= serving["latency"]["p50_ms"] > 0
    assert calls["calls"] >= serving["ok"] * 0.9 and calls["batch_mean"] == 1 and calls["batch_max"] == 1
    probe = json.loads((out / "ranks" / "rank0" / "batch_probe.json").read_text())
    sizes = [b for b, _ in probe["batches"]]
    assert probe["rows"] == 1 and len(sizes) >= 2 and sizes == [2**i for i in range(len(sizes))], sizes
    text = res.stderr
    assert "Serving under load" in text and "p90" in text and "request(s) a call" in text
    found = {f["id"]: f for f in report["findings"]}
    assert "serve.batching" in found, [f["id"] for f in report["findings"]]
    assert "cpu.oversubscription" not in found  # (the load's own CPU is pinchpoint's, not a neighbour's)
    if beside_load(report):
        return  # the truth was measured on an idle machine
    if missing_row(EXAMPLE.stem) is not None:
        pytest.skip(missing_row(EXAMPLE.stem))  # (what holds anywhere was asserted above)
    assert report["findings"][0]["id"] == "serve.batching"
    truth = machine_truth(what=0)[EXAMPLE.stem]["--fix"]
    estimate = found["serve.batching"]["estimated_speedup"]
    assert abs(estimate / truth - 1) <= TOLERANCE, (estimate, truth)


def test_a_thread_pool_servers_model_calls_are_seen_off_the_main_thread(tmp_path: Path) -> None:
    """The same server with a plain `def` endpoint (`--sync`): FastAPI runs it in its thread pool, so no
    model call is on the main thread and no step is recorded; the calls are placed among the requests all
    the same, and batching is named (no truth row for this variant: named, not ordered)."""
    plan, port, out = _plan(), _port(), tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(out),
         "--load", f"http://127.0.0.1:{port}{plan['path']}", "--load-rate", plan["rate"], "--load-duration", "5",
         "--load-body", str(EXAMPLES / plan["body"]), "--", sys.executable, str(EXAMPLE), "--port", str(port), "--sync"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    calls = report["serving"]["model_calls"]
    assert calls["threads"] > 1 and calls["batch_max"] == 1 and calls["calls"] >= report["serving"]["ok"] * 0.9
    assert report["steps"]["count"] == 0 if "count" in report["steps"] else True
    assert "serve.batching" in {f["id"] for f in report["findings"]}


GENERATOR = EXAMPLES / "serve_generate.py"


def test_a_generation_servers_streams_are_timed_by_token_and_its_recompute_found(tmp_path: Path) -> None:
    """examples/serve_generate.py (FastAPI streaming server-sent events, one token an event, no KV cache,
    the streams of requests in flight taking turns a token each) under a short load: each answer's events
    are counted as its tokens (32, the closing `[DONE]` left out), the serving section gives the time per
    output token, and compute.recompute is found across the interleaved streams (a generation a request)
    and priced by the context probe. Its ordering is held to this kind's truth rows where there are (the
    estimate's distance from that row is in decision 121, not asserted: x1.73-2.21 against x1.78 here)."""
    port, out = _port(), tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(out),
         "--load", f"http://127.0.0.1:{port}/generate", "--load-rate", "40", "--load-duration", "2",
         "--load-body", str(EXAMPLES / "generate.json"), "--", sys.executable, str(GENERATOR), "--port", str(port)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    answered = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    answered = [r for r in answered if r["status"] == 200]
    asked = json.loads((EXAMPLES / "generate.json").read_text())["max_new_tokens"]
    assert answered and {r["events"] for r in answered} == {asked}, {r["events"] for r in answered}
    report = json.loads((out / "report.json").read_text())
    serving = report["serving"]
    assert serving["per_token"] is not None and serving["first_token"] is not None, serving
    found = {f["id"]: f for f in report["findings"]}
    assert "compute.recompute" in found, [f["id"] for f in report["findings"]]
    recompute = found["compute.recompute"]
    assert recompute["estimate_basis"] == "probe", recompute
    generations = int(re.search(r"in (\d+) generations", recompute["evidence"][0]).group(1))  # type: ignore[union-attr]
    assert generations >= 0.9 * len(answered), (generations, len(answered))
    if beside_load(report) or missing_row(GENERATOR.stem) is not None:
        return  # (the truth was measured idle, on one kind)
    lead = report["findings"][0]["id"]
    # The lead's fix measured as much as the best one on this kind, within the margin, or this kind never
    # measured it: the KV cache (compute.recompute) and batching the streams (`--batch`, host.dispatch's
    # "serve 32 a call") measured x1.54 and x1.78 here, a tie. Never a cause whose measured fix paid less.
    measured = measured_causes(GENERATOR.stem, "compute.recompute")
    tops = acceptable_tops(GENERATOR.stem, "compute.recompute", REAL_SHARE)
    assert lead in tops or lead not in measured, (lead, measured)


THREADS_SERVER = '''
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch

torch.set_num_threads(16)  # 16 intra-op threads on the machine's few cores
model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(6)]).eval()
x = torch.randn(64, 512)


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        with torch.inference_mode():
            body = str(float(model(x)[0, 0])).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


HTTPServer.request_queue_size = 1024
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def test_try_measures_a_servers_fix_under_the_same_load(tmp_path: Path) -> None:
    """A server whose model runs 16 threads on this machine's cores: `try --load` runs it under one load
    as the baseline, then with 2 threads and the baseline again (B T T B), and compares the requests each
    answered a second. (A machine with 16 or more cores has nothing to fix: then no plan is asserted.)"""
    script, port = tmp_path / "threads_server.py", _port()
    script.write_text(THREADS_SERVER)
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "try", "--fix", "all", "-o", str(tmp_path / "try"),
         "--load", f"http://127.0.0.1:{port}/", "--load-rate", "400", "--load-duration", "4",
         "--", sys.executable, str(script), str(port)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads((tmp_path / "try" / "try.json").read_text())
    assert doc["load"] == "400 requests a second for 4 s" and "requests answered a second" in res.stdout
    rows = {r["id"]: r for r in doc["tried"]}
    if (os.cpu_count() or 1) >= 16:
        return
    row = rows["cpu.oversubscription"]
    assert row["applied"] and row["pairs"] == 2 and row["speedup"] is not None, row
    for side in ("baseline", "baseline-whole-2", f"{row['fix']}", f"{row['fix']}-again"):
        assert json.loads((tmp_path / "try" / side / "load.json").read_text())["ok"] > 0, side
    baseline = json.loads((tmp_path / "try" / "baseline" / "report.json").read_text())
    if beside_load(baseline):
        return  # (a comparison of whole runs beside another load is not one)
    assert row["significant"] and row["speedup"] > 1, row
