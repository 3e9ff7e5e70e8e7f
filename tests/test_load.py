"""`pinchpoint load`: an open-loop HTTP load on a real server over loopback (the standard library's
threading server in this process), bounded in count and time; bad targets refused in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest

from pinchpoint.analysis.serving import summarize
from pinchpoint.errors import UsageError
from pinchpoint.report.load_doc import load_doc, load_schema
from pinchpoint.serve.load import Plan, run_load, target


class Server(ThreadingHTTPServer):
    daemon_threads = True
    delay_s = 0.01
    bodies: list[bytes]


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:
        time.sleep(self.server.delay_s)
        self._answer(b'{"ok": true}')

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.bodies.append(body)
        time.sleep(self.server.delay_s)
        self._answer(json.dumps({"got": len(body)}).encode())

    def _answer(self, payload: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server(("127.0.0.1", 0), Handler)
    srv.bodies = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


def _url(srv: Server, path: str = "/predict") -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


def test_every_arrival_is_sent_answered_and_timed_from_when_it_was_due(server: Server) -> None:
    plan = Plan(rate=40, duration_s=0.5)
    requests = run_load(target(_url(server), b'{"tokens": [1, 2, 3]}'), plan)
    assert len(requests) == 20 and all(r.ok for r in requests)
    assert server.bodies == [b'{"tokens": [1, 2, 3]}'] * 20  # each POSTed its body
    s = summarize(requests)
    assert (s.sent, s.ok, s.failed, s.dropped) == (20, 20, 0, 0)
    assert s.latency is not None and s.first_byte is not None
    assert s.latency.p50_ms >= server.delay_s * 1000  # the server's own 10 ms is inside every latency
    assert s.first_byte.p50_ms <= s.latency.p50_ms <= s.latency.p99_ms <= s.latency.max_ms
    doc = load_doc(_url(server), plan, s).to_dict()
    jsonschema.validate(doc, load_schema())
    assert doc["ok"] == 20 and doc["schema"] == "pinchpoint.load/1"


def test_arrivals_that_find_the_server_saturated_are_dropped_not_delayed(server: Server) -> None:
    server.delay_s = 0.3
    requests = run_load(target(_url(server)), Plan(rate=20, duration_s=0.5, max_in_flight=1))
    s = summarize(requests)
    assert s.sent + s.dropped == 10 and s.dropped >= 5 and s.ok == s.sent


def test_a_server_that_never_answers_times_out_within_the_bound() -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        start = time.monotonic()
        requests = run_load(
            target(f"http://127.0.0.1:{listener.getsockname()[1]}/"),
            Plan(rate=10, duration_s=0.3, timeout_s=0.5),
        )
        assert time.monotonic() - start < 10  # (a bound on the run, not a timing: it would hang otherwise)
    s = summarize(requests)
    assert s.ok == 0 and s.failed == 3 and s.errors == (("no answer within 0.5 s", 3),)


def test_arrivals_are_even_or_seeded_poisson_and_bounded() -> None:
    assert Plan(rate=4, duration_s=1).arrivals() == [0.0, 0.25, 0.5, 0.75]
    poisson = Plan(rate=100, duration_s=2, poisson=True).arrivals()
    assert poisson == Plan(rate=100, duration_s=2, poisson=True).arrivals()  # seeded: the same load again
    assert 120 < len(poisson) < 280 and poisson == sorted(poisson)
    for bad in (Plan(rate=0, duration_s=1), Plan(rate=10, duration_s=0), Plan(rate=10, duration_s=1e6)):
        with pytest.raises(UsageError):
            bad.arrivals()


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3:8000/",
        "http://example.invalid/",
        "https://127.0.0.1:8443/",
        "127.0.0.1:8000",
        "ftp://localhost/",
    ],
)
def test_a_target_off_this_machine_or_not_http_is_refused(url: str) -> None:
    with pytest.raises(UsageError):
        target(url)
    assert target("http://localhost:8000/x?y=1").path == "/x?y=1"
    assert target("http://[::1]:9000").port == 9000


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", "load", *args], capture_output=True, text=True, timeout=60
    )


def test_the_command_prints_one_line_writes_load_json_and_fails_where_requests_failed(
    server: Server, tmp_path: Path
) -> None:
    out = tmp_path / "load.json"
    done = _cli(_url(server), "--rate", "20", "--duration", "0.5", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1 and "10 answered" in done.stdout and "p90" in done.stdout
    assert json.loads(out.read_text())["sent"] == 10
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = _cli(f"http://127.0.0.1:{closed}/", "--rate", "10", "--duration", "0.2")
    assert refused.returncode == 1 and "2 failed" in refused.stdout, refused.stdout
    remote = _cli("http://10.1.2.3:8000/", "--duration", "1")
    assert remote.returncode == 2 and "loopback" in remote.stderr and "Traceback" not in remote.stderr
