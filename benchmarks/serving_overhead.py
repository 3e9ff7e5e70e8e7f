"""pinchpoint's cost to a served model's request latency: the same server and load, bare and under pinchpoint,
side by side in rounds whose arm order rotates.

Each arm starts examples/serve_one_at_a_time.py (or --server SCRIPT) on a free port, waits until it answers,
sends the same open-loop load (`pinchpoint load`, a process of its own in every arm), and stops the server
with SIGINT. Arms: `bare`; `run` (the server under `pinchpoint run`, the load from outside); `run-load` (the
server under `pinchpoint run --load`: the load from pinchpoint's launcher, the batch probe at exit). Per arm,
per round: the p50 and p90 latency and the throughput, as ratios to that round's bare arm. The rate should
leave the server idle part of the time (the issue's bar: ≤ 2% on the p50 latency of a server that keeps up).

    .venv/bin/python benchmarks/serving_overhead.py --rounds 6 --rate 40 --duration 8
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = ROOT / "examples" / "request.json"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server never answered")


def _load(url: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    subprocess.run(
        [sys.executable, "-m", "pinchpoint", "load", url, "--rate", str(args.rate), "--duration",
         str(args.duration), "--body", str(BODY), "--json", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    return {"p50": doc["latency"]["p50_ms"], "p90": doc["latency"]["p90_ms"], "rps": doc["throughput_rps"]}


def arm(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    port = _port()
    url = f"http://127.0.0.1:{port}/predict"
    server = [sys.executable, str(args.server), "--port", str(port)]
    run_dir = tmp / f"{name}-{time.monotonic_ns()}"
    if name == "run-load":
        cmd = [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(run_dir), "--load", url,
               "--load-rate", str(args.rate), "--load-duration", str(args.duration), "--load-body", str(BODY),
               "--", *server]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
        doc = json.loads((run_dir / "load.json").read_text())
        return {"p50": doc["latency"]["p50_ms"], "p90": doc["latency"]["p90_ms"], "rps": doc["throughput_rps"]}
    cmd = server if name == "bare" else [sys.executable, "-m", "pinchpoint", "run", "-q", "-o", str(run_dir), "--", *server]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(port, proc)
        return _load(url, args, tmp / f"{name}.json")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--rate", type=float, default=40.0)
    p.add_argument("--duration", type=float, default=8.0)
    p.add_argument("--server", type=Path, default=ROOT / "examples" / "serve_one_at_a_time.py")
    p.add_argument("--arm", action="append", choices=("run", "run-load"), help="default: both")
    args = p.parse_args()
    arms = ["bare", *(args.arm or ["run", "run-load"])]
    ratios: dict[str, dict[str, list[float]]] = {a: {"p50": [], "p90": [], "rps": []} for a in arms[1:]}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            order = arms[r % len(arms) :] + arms[: r % len(arms)]
            got = {a: arm(a, args, Path(d)) for a in (order if r % 2 == 0 else order[::-1])}
            line = []
            for a in arms[1:]:
                for k in ("p50", "p90", "rps"):
                    ratios[a][k].append(got[a][k] / got["bare"][k])
                line.append(f"{a} p50 ×{got[a]['p50'] / got['bare']['p50']:.3f}")
            print(f"round {r}: bare p50 {got['bare']['p50']:.2f} ms, {got['bare']['rps']:.1f}/s; " + ", ".join(line))
    print(f"\n{args.rounds} rounds at {args.rate:g}/s for {args.duration:g} s (ratios to bare; median, mean)")
    for a, ks in ratios.items():
        cells = ", ".join(f"{k} {statistics.median(v):.3f} / {statistics.fmean(v):.3f}" for k, v in ks.items())
        print(f"  {a:9s} {cells}")


if __name__ == "__main__":
    main()
