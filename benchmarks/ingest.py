"""Speed and memory of `read_trace` on real traces and on a generated >= 1 GB trace.

    python benchmarks/ingest.py [TRACE ...] [--big-gb 1.0] [--big-source FILE] [--keep]

Each measurement runs in a fresh subprocess, so its peak RSS (`ru_maxrss`) is the reader's alone; the
interpreter's own start-up RSS (numpy + msgspec imported) is printed too. MB/s counts the JSON text
(after gunzip). The big trace is the source trace's events replicated along the time axis (each copy
shifted by the source's span), written as plain JSON and as .json.gz under /tmp, never in the repo.

ru_maxrss survives exec on Linux, so the generator runs in its own process too (else the children would
report the generator's peak).

`--hta-python PATH` (the interpreter of a throwaway venv with `HolisticTraceAnalysis` and `pandas<3`)
adds the paired comparison the issue asks for: for each trace, `pinchpoint analyze` end to end (read,
analyse, diagnose, write report.json) against HTA 0.5's `TraceAnalysis` + `get_temporal_breakdown()`
(rounding off, last step kept), each in a fresh process, wall time and peak RSS side by side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path("/work/shared/traces")
DEFAULT = [
    SHARED / "hta/df_index_resolver/df_index_resolver.json.gz",
    SHARED / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    SHARED / "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    SHARED / "tracelens/mi300/resnet_act_checkpoint.json.gz",
]

CHILD = """
import json, resource, sys, time
from pathlib import Path
import numpy, msgspec
from pinchpoint.ingest.kineto import read_trace
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
tr = read_trace(Path(sys.argv[1]))
dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": dt, "json_bytes": tr.meta.trace_bytes, "events": len(tr.events),
                  "memory": len(tr.memory), "rss_kb": rss, "base_kb": base, "warnings": list(tr.warnings)}))
"""


HTA_CHILD = """
import logging, os, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
p = sys.argv[1]
ta = TraceAnalysis(trace_files={0: p}, trace_dir=os.path.dirname(p), include_last_profiler_step=True)
ta.get_temporal_breakdown(visualize=False)
"""

TIMED = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
res = subprocess.run(sys.argv[1:], capture_output=True, text=True)
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "rc": res.returncode, "rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "err": res.stderr[-400:]}))
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Wall time and peak RSS of `cmd` run in a fresh process (measured by a clean parent)."""
    out = subprocess.run([sys.executable, "-c", TIMED, *cmd], capture_output=True, text=True, env=env)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def hta_run(path: Path, hta_python: Path | None) -> dict[str, object] | None:
    """HTA 0.5 parsing `path` and computing its temporal breakdown (None: no HTA interpreter given)."""
    if hta_python is None:
        return None
    env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
    r = timed([str(hta_python), "-c", HTA_CHILD, str(path)], env)
    return r if r.get("rc") == 0 else {**r, "failed": True}


def analyze_run(path: Path) -> dict[str, object]:
    """`pinchpoint analyze PATH --json ... -q`, end to end."""
    with tempfile.TemporaryDirectory() as tmp:
        cli = [sys.executable, "-m", "pinchpoint", "analyze", str(path), "-q", "--json", f"{tmp}/r.json"]
        return timed(cli)


def paired(path: Path, json_bytes: int, hta_python: Path | None) -> None:
    ours = analyze_run(path)
    hta = hta_run(path, hta_python)
    mb = json_bytes / 1e6
    o_s, o_rss = float(ours["s"]), int(ours["rss_kb"]) / 1024  # type: ignore[arg-type, call-overload]
    line = f"  paired: pinchpoint analyze {o_s:6.2f} s, peak RSS {o_rss:6.0f} MB ({o_rss / mb:4.2f}x JSON)"
    if hta is not None:
        if hta.get("failed"):
            line += f" | HTA failed: {str(hta.get('err', '')).strip().splitlines()[-1:]}"
        else:
            h_s, h_rss = float(hta["s"]), int(hta["rss_kb"]) / 1024  # type: ignore[arg-type, call-overload]
            line += f" | HTA {h_s:7.2f} s, peak RSS {h_rss:6.0f} MB ({h_rss / mb:4.2f}x) | HTA/ours {h_s / o_s:5.1f}x"
    print(line, flush=True)


def measure(path: Path) -> dict[str, object]:
    src = Path(__file__).resolve().parents[1] / "src"
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{path}: reader failed:\n{out.stderr}")
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def make_big(source: Path, target_bytes: float, out_dir: Path) -> tuple[Path, Path]:
    """Replicate the source's events along time until the JSON passes `target_bytes`; write .json and .gz."""
    doc = json.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
    events = doc.pop("traceEvents")
    lines = [json.dumps(e) for e in events]
    stamps = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(stamps) - min(stamps) + 1000
    size = sum(len(s) + 2 for s in lines)
    copies = max(1, int(target_bytes // size) + 1)
    ts_re = re.compile(r'"ts": (-?[0-9.]+)')
    plain = out_dir / f"big_{copies}x_{source.name.split('.')[0]}.json"
    with open(plain, "w") as f:
        f.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        for c in range(copies):
            shift = c * span

            def bump(m: re.Match[str], shift: float = shift) -> str:
                v = m.group(1)
                return f'"ts": {int(v) + int(shift)}' if "." not in v else f'"ts": {float(v) + shift:.3f}'

            sep = ",\n" if c else ""
            f.write(sep + ",\n".join(ts_re.sub(bump, s, count=1) for s in lines))
        f.write("\n]}\n")
    gz = plain.with_suffix(".json.gz")
    subprocess.run(f"gzip -1 -c {plain} > {gz}", shell=True, check=True)
    return plain, gz


def report(path: Path, r: dict[str, object]) -> None:
    mb = int(r["json_bytes"]) / 1e6  # type: ignore[call-overload]
    s = float(r["s"])  # type: ignore[arg-type]
    rss_mb = int(r["rss_kb"]) / 1024  # type: ignore[call-overload]
    base_mb = int(r["base_kb"]) / 1024  # type: ignore[call-overload]
    print(
        f"{path.name[:48]:48s} {mb:8.1f} MB JSON {s:7.2f} s {mb / s:7.1f} MB/s  events {r['events']:>9}  "
        f"peak RSS {rss_mb:7.1f} MB (start {base_mb:.0f})  RSS/JSON {rss_mb / mb:5.2f}",
        flush=True,
    )
    for w in r["warnings"]:  # type: ignore[attr-defined]
        print(f"    warning: {w}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="*", type=Path)
    ap.add_argument("--big-gb", type=float, default=1.0, help="size of the generated trace (0: skip)")
    ap.add_argument("--big-source", type=Path, default=DEFAULT[0])
    ap.add_argument("--keep", action="store_true", help="keep the generated trace in /tmp")
    ap.add_argument(
        "--hta-python", type=Path, help="python of a venv with HolisticTraceAnalysis (paired run)"
    )
    ap.add_argument("--generate-into", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.generate_into:  # child mode: keeps the generator's memory out of the measuring parent
        print("\n".join(str(p) for p in make_big(args.big_source, args.big_gb * 1e9, args.generate_into)))
        return 0
    for path in args.traces or [p for p in DEFAULT if p.exists()]:
        r = measure(path)
        report(path, r)
        paired(path, int(r["json_bytes"]), args.hta_python)  # type: ignore[call-overload]
    if args.big_gb > 0:
        out_dir = Path(tempfile.mkdtemp(prefix="pinchpoint-bench-"))
        t = time.perf_counter()
        gen = [sys.executable, __file__, "--big-gb", str(args.big_gb), "--big-source", str(args.big_source)]
        made = subprocess.run(
            [*gen, "--generate-into", str(out_dir)], capture_output=True, text=True, check=True
        )
        plain, gz = (Path(p) for p in made.stdout.split())
        print(f"generated {plain} ({plain.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t:.0f} s")
        try:
            for path in (plain, gz):
                r = measure(path)
                report(path, r)
                paired(path, int(r["json_bytes"]), args.hta_python)  # type: ignore[call-overload]
        finally:
            if not args.keep:
                plain.unlink()
                gz.unlink()
                out_dir.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
