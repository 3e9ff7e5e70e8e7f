"""`pinchpoint run --load`: a real server process started under pinchpoint, loaded over loopback once its
port answers, then stopped; the requests and the model calls meanwhile read into report.json's `serving`
section. The servers here are the standard library's (no model: the load, the stop and the bad cases);
examples/serve_one_at_a_time.py's FastAPI model server is the e2e one (tests/test_serving_e2e.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from conftest import make_step
from pinchpoint.analysis.serving import model_calls, summarize
from pinchpoint.ingest.served import served_load
from pinchpoint.report.report_doc import report_schema
from pinchpoint.serve.load import Events
from pinchpoint.trace.serving import Request
from pinchpoint.trace.step import StepKind

MS = 1_000_000


def _calls(start_ms: float, every_ms: float, dur_ms: float, n: int, rows: int) -> list:
    return [
        replace(make_step(i, int((start_ms + i * every_ms) * MS), {"forward": dur_ms}, kind=StepKind.INFERENCE), rows=rows)
        for i in range(n)
    ]


def test_calls_of_one_request_with_others_arrived_read_as_one_at_a_time() -> None:
    """Requests every 2 ms, a model that takes 5 ms a call and answers one: a queue builds, and every
    call after the first begins with others waiting."""
    requests = [Request(due_ns=i * 2 * MS, end_ns=(i + 1) * 5 * MS, status=200) for i in range(20)]
    calls = model_calls(_calls(0, 5, 5, 20, rows=1), requests, wall_s=0.1)
    assert calls is not None and calls.calls == 20 and calls.batch_mean == 1 and calls.batch_max == 1
    assert calls.waiting_mean > 3 and calls.queued_share >= 0.85  # (the first calls came before the queue)
    assert calls.one_at_a_time_share is not None and calls.one_at_a_time_share >= 0.85
    assert calls.busy_share == pytest.approx(1.0)


def test_batched_calls_leave_no_one_waiting() -> None:
    """Four requests a call, all that had arrived: nobody waits beside the call."""
    requests = [Request(due_ns=(i // 4) * 10 * MS, end_ns=((i // 4) * 10 + 5) * MS, status=200) for i in range(20)]
    calls = model_calls(_calls(0.1, 10, 5, 5, rows=4), requests, wall_s=0.045)
    assert calls is not None and calls.batch_mean == 4 and calls.waiting_mean == 0
    assert calls.queued_share == 0 and calls.one_at_a_time_share == 0
    assert model_calls([], requests, wall_s=0.045) is None  # no model call seen
    train = [replace(s, kind=StepKind.TRAIN) for s in _calls(0.1, 10, 5, 5, rows=4)]
    assert model_calls(train, requests, wall_s=0.045) is None  # only inference calls count


def test_the_summary_counts_answered_failed_and_dropped_requests() -> None:
    requests = [
        Request(due_ns=0, first_ns=2 * MS, end_ns=4 * MS, status=200),
        Request(due_ns=MS, first_ns=3 * MS, end_ns=9 * MS, status=200),
        Request(due_ns=2 * MS, end_ns=3 * MS, status=500),
        Request(due_ns=3 * MS, error="connection refused"),
        Request(due_ns=4 * MS, dropped=True),
    ]
    s = summarize(requests)
    assert (s.sent, s.ok, s.failed, s.dropped) == (4, 2, 2, 1)
    assert s.latency is not None and s.latency.max_ms == 8 and s.wall_s == pytest.approx(0.009)
    assert dict(s.errors) == {"HTTP 500": 1, "connection refused": 1}
    assert summarize([]).sent == 0 and summarize([]).latency is None


def test_a_damaged_requests_file_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    (tmp_path / "load.json").write_text('{"url": "http://127.0.0.1:1/x", "rate": 5, "duration_s": 2}')
    (tmp_path / "requests.jsonl").write_text(
        '{"due_ns": 5, "end_ns": 9, "status": 200}\n{"due_ns": "x"}\n[1]\n{"due_ns": 1, "end_ns": 0, "status": 200}\n{"due_'
    )
    warnings: list[str] = []
    load = served_load(tmp_path, warnings)
    assert load is not None and load.rate == 5 and [r.due_ns for r in load.requests] == [1, 5]
    assert load.requests[0].end_ns is None  # (an answer before its arrival is no answer)
    assert any("unreadable" in w for w in warnings)
    assert served_load(tmp_path / "nothing", []) is None


# ------------------------------------------------------------------------------ real servers, run --load


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(tmp_path: Path, load: list[str], program: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(tmp_path / "run"), *load, "--", *program],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
    )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split(")")[-1].split()[0] == "Z")


def test_a_server_is_loaded_once_it_answers_then_stopped(tmp_path: Path) -> None:
    """Python's http.server, started under pinchpoint: GETs at 40/s for 1.5 s once its port answers,
    then SIGINT ends it; load.json, requests.jsonl and the report's serving section hold the load."""
    port = _free_port()
    res = _run(
        tmp_path,
        ["--load", f"http://127.0.0.1:{port}/", "--load-rate", "40", "--load-duration", "1.5"],
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
    )
    run = tmp_path / "run"
    meta = json.loads((run / "meta.json").read_text())
    assert not _alive(meta["child_pid"])
    load = json.loads((run / "load.json").read_text())
    assert load["sent"] == 60 and load["ok"] == 60 and load["latency"]["p50_ms"] > 0, load
    assert len((run / "requests.jsonl").read_text().splitlines()) == 60
    report = json.loads((run / "report.json").read_text())
    jsonschema.validate(report, report_schema())
    serving = report["serving"]
    assert serving["ok"] == 60 and serving["throughput_rps"] > 20 and serving["model_calls"] is None
    # No model, so no step: the run says so (exit 3), as for any program without one; the load is kept.
    assert res.returncode == 3, res.stderr[-2000:]
    rendered = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "report", str(run), "--no-color"], capture_output=True, text=True
    )
    assert "Serving under load" in rendered.stderr + rendered.stdout
    assert "60 requests sent" in rendered.stderr + rendered.stdout


def test_a_server_that_never_answers_is_stopped_and_said_so(tmp_path: Path) -> None:
    port = _free_port()
    res = _run(
        tmp_path,
        ["--load", f"http://127.0.0.1:{port}/", "--load-wait", "2"],
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); time.sleep(60)"],
    )
    assert res.returncode != 0 and "--load: nothing answered" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr  # (the program ends by SIGINT's default action: no traceback)
    run = tmp_path / "run"
    assert not _alive(json.loads((run / "meta.json").read_text())["child_pid"])
    assert json.loads((run / "load.json").read_text())["error"].startswith("nothing answered")


def test_a_program_that_ends_before_answering_is_said_so(tmp_path: Path) -> None:
    port = _free_port()
    res = _run(tmp_path, ["--load", f"http://127.0.0.1:{port}/"], [sys.executable, "-c", "pass"])
    assert res.returncode == 1 and "the program ended (exit code 0) before" in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize(
    ("load", "message"),
    [
        (["--load", "http://example.invalid:80/"], "the load stays on this machine"),
        (["--load", "http://127.0.0.1:9/", "--load-rate", "0"], "--rate must be in"),
        (["--load", "http://127.0.0.1:9/", "--load-body", "missing.json"], "--load-body missing.json"),
        (["--load", "http://127.0.0.1:9/", "--load-wait", "-1"], "--load-wait must be in"),
    ],
)
def test_bad_load_options_are_refused_before_the_program_starts(
    tmp_path: Path, load: list[str], message: str
) -> None:
    res = _run(tmp_path, load, [sys.executable, "-c", "open('started', 'w')"])
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "started").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_pinchpoint_alone_stops_the_server_and_keeps_the_load(tmp_path: Path, sig: int) -> None:
    """A supervisor's SIGINT or SIGTERM to pinchpoint's pid (not a terminal's Ctrl-C) mid-load: the server
    is passed the signal and ends, the arrivals stop, and what was measured is written."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(tmp_path / "run"),
         "--load", f"http://127.0.0.1:{port}/", "--load-rate", "20", "--load-duration", "60", "--",
         sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    requests = tmp_path / "run" / "meta.json"
    try:
        for _ in range(200):  # the server answers and the load runs a while
            if requests.exists() and json.loads(requests.read_text()).get("child_pid"):
                break
            subprocess.run(["sleep", "0.05"])
        subprocess.run(["sleep", "2"])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    run = tmp_path / "run"
    assert not _alive(json.loads((run / "meta.json").read_text())["child_pid"])
    load = json.loads((run / "load.json").read_text())
    assert 0 < load["ok"] < 1200 and "Traceback" not in err, (load, err[-2000:])


CRASHING_SERVER = """
import os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
served = [0]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        served[0] += 1
        if served[0] > 10:
            os._exit(7)  # a crash mid-load
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_server_that_crashes_mid_load_keeps_what_was_measured(tmp_path: Path) -> None:
    """The server dies after 10 requests: the arrivals stop, the answered ones are kept, and the run
    ends with the program's own exit code and a report."""
    port = _free_port()
    (tmp_path / "crash.py").write_text(CRASHING_SERVER)
    res = _run(
        tmp_path,
        ["--load", f"http://127.0.0.1:{port}/", "--load-rate", "20", "--load-duration", "30"],
        [sys.executable, str(tmp_path / "crash.py"), str(port)],
    )
    assert res.returncode == 7 and "Traceback" not in res.stderr, res.stderr[-2000:]
    load = json.loads((tmp_path / "run" / "load.json").read_text())
    assert load["ok"] == 10 and load["sent"] < 100, load  # (30 s at 20/s would be 600)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["serving"]["ok"] == 10 and report["run"]["exit_code"] == 7


def test_calls_from_a_thread_pool_share_the_requests_inside() -> None:
    """Two threads each running a 10 ms batch-1 call at once, four requests inside: two waiting."""
    from pinchpoint.trace.serving import ModelCall

    requests = [Request(due_ns=0, end_ns=12 * MS, status=200) for _ in range(4)]
    pool = [ModelCall(start_ns=MS, end_ns=11 * MS, rows=1, thread=t) for t in (7, 8)]
    calls = model_calls([], requests, wall_s=0.012, others=pool)
    assert calls is not None and calls.calls == 2 and calls.threads == 2
    assert calls.in_flight == pytest.approx(2.0) and calls.waiting_mean == 2.5  # (3 then 2)
    assert calls.busy_share == pytest.approx(10 / 12)


def test_pinchpoints_own_cpu_is_not_another_programs() -> None:
    """Two samples a second apart: the machine's user time grew by 1.6 s, the program's tree by 0.9 s and
    pinchpoint's own (the launcher sending a load, the sampler) by 0.6 s: 0.1 core is another program's."""
    from pinchpoint.analysis.load import foreign_intervals
    from pinchpoint.trace.run import ProcSample, SystemSample

    def sample(t_s: float, machine: float, tree: float, tool: float | None) -> SystemSample:
        proc = ProcSample(pid=10, ppid=1, name="python", user_s=tree, sys_s=0.0, rss_bytes=0, threads=1)
        return SystemSample(
            t_ns=int(t_s * 1e9), cpu_percent_per_core=(50.0, 50.0), machine_user_s=machine, procs=(proc,),
            tool_user_s=tool, tool_sys_s=0.0 if tool is not None else None,
        )  # fmt: skip

    (iv,) = foreign_intervals([sample(0, 100.0, 5.0, 1.0), sample(1, 101.6, 5.9, 1.6)])
    assert iv.foreign_cores == pytest.approx(0.1)
    (older,) = foreign_intervals([sample(0, 100.0, 5.0, None), sample(1, 101.6, 5.9, None)])
    assert older.foreign_cores == pytest.approx(0.7)  # (a run directory from before: the tool not recorded)


def test_a_killed_pinchpoint_takes_its_server_with_it(tmp_path: Path) -> None:
    """SIGKILL to pinchpoint (no handler runs): the server it started gets SIGTERM from the kernel (its
    parent-death signal) and ends, instead of running on unowned."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(tmp_path / "run"),
         "--load", f"http://127.0.0.1:{port}/", "--load-rate", "20", "--load-duration", "60", "--",
         sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    meta = tmp_path / "run" / "meta.json"
    try:
        for _ in range(200):
            if meta.exists() and json.loads(meta.read_text()).get("child_pid"):
                break
            subprocess.run(["sleep", "0.05"])
        child = json.loads(meta.read_text())["child_pid"]
        subprocess.run(["sleep", "1"])
        proc.kill()
        proc.wait(30)
        for _ in range(100):
            if not _alive(child):
                break
            subprocess.run(["sleep", "0.05"])
        assert not _alive(child)
    finally:
        proc.kill()


def test_a_streamed_answer_gives_time_to_first_token_and_per_chunk() -> None:
    """Answers whose body came in 5 reads, the first 20 ms after arrival, the last 60 ms later: first
    token 20 ms, a chunk every 15 ms. One-read (JSON) answers give neither."""
    streamed = [
        Request(due_ns=i * MS, first_ns=i * MS + 5 * MS, body_ns=i * MS + 20 * MS, end_ns=i * MS + 80 * MS,
                status=200, chunks=5)
        for i in range(10)
    ]  # fmt: skip
    s = summarize(streamed)
    assert s.first_token is not None and s.first_token.p50_ms == pytest.approx(20)
    assert s.per_chunk is not None and s.per_chunk.p50_ms == pytest.approx(15)
    plain = [replace(r, chunks=1) for r in streamed]
    assert summarize(plain).first_token is None and summarize(plain).per_chunk is None
    assert s.per_token is None  # (no server-sent events counted)
    events = summarize([replace(r, events=7) for r in streamed])  # 7 events in the same 60 ms
    assert events.per_token is not None and events.per_token.p50_ms == pytest.approx(10)
    assert events.per_chunk == s.per_chunk


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 7, 13, 14, 64, 10_000])
def test_server_sent_events_are_counted_however_the_body_is_cut(cut: int) -> None:
    """Chunked framing between events, a closing `data: [DONE]` (not a token), reads cut anywhere."""
    body = b"".join(b"%x\r\ndata: %d\n\n\r\n" % (len(b"data: %d\n\n" % i), i) for i in range(12))
    body += b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    counted = Events()
    for at in range(0, len(body), cut):
        counted.feed(body[at : at + cut])
    assert counted.events == 12
    plain = Events()
    plain.feed(b'{"data: not an event": 1}')  # (not at a line's start)
    assert plain.events == 0


STREAMING_SERVER = """
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        self.wfile.flush()
        for i in range(6):
            time.sleep(0.01)
            self.wfile.write(f"data: token {i}\\n\\n".encode()); self.wfile.flush()
        self.wfile.write(b"data: [DONE]\\n\\n"); self.wfile.flush()
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_streaming_endpoint_is_timed_to_its_first_token(tmp_path: Path) -> None:
    """A real server streaming six events 10 ms apart, under `run --load`: the serving section holds the
    time to the first token (~10 ms) and between chunks (~10 ms)."""
    port = _free_port()
    (tmp_path / "stream.py").write_text(STREAMING_SERVER)
    res = _run(
        tmp_path,
        ["--load", f"http://127.0.0.1:{port}/", "--load-rate", "10", "--load-duration", "1.5"],
        [sys.executable, str(tmp_path / "stream.py"), str(port)],
    )
    assert res.returncode == 3, res.stderr[-2000:]  # (no model: no steps; the load is kept)
    serving = json.loads((tmp_path / "run" / "report.json").read_text())["serving"]
    assert serving["ok"] == 15, serving
    assert 8 <= serving["first_token"]["p50_ms"] < 100 and 5 <= serving["per_chunk"]["p50_ms"] < 100, serving
    assert serving["first_byte"]["p50_ms"] < serving["first_token"]["p50_ms"]  # (headers came first)
    assert serving["per_token"] is not None, serving  # six events a token each, [DONE] left out
    counts = [json.loads(line)["events"] for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert counts and set(counts) == {6}, counts


def test_the_batch_probe_keeps_what_it_measured_when_its_budget_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model whose call takes 10 ms a row, a 0.15 s budget: batches 1 and 2 are measured, batch 4's
    warm-up outruns the budget (no timed call: CI once lost every batch to that), and the file holds the
    two, in order, on the probe's own clock."""
    import time

    import torch

    from pinchpoint.capture import batch_probe

    class Slow(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            time.sleep(0.01 * x.shape[0])
            return x

    quiet: list[bool] = []
    monkeypatch.setattr(batch_probe, "BUDGET_S", 0.15)
    probe = batch_probe.BatchProbe(lambda: tmp_path, quiet.append)
    model = Slow()
    with torch.inference_mode():
        probe.note(model, (torch.zeros(1, 4),), {}, torch)
    probe.run(torch)
    doc = json.loads((tmp_path / batch_probe.FILE).read_text())
    assert doc["rows"] == 1 and [b for b, _ in doc["batches"]] == [1, 2], doc
    assert 9 <= doc["batches"][0][1] < 50 and doc["end_ns"] > doc["start_ns"] and quiet == [True, False]
