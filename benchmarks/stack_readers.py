"""Speed and memory of the stack-file readers (perf script, folded stacks, VTune CSV), beside Kineto's.

    python benchmarks/stack_readers.py [--size-mb 50] [--repeat 3] [--formats perf,folded,vtune] [--profile]

Each big file is built from real inputs in a temporary directory, never the repository:
- perf: the largest perf script text with deep Python/native stacks (`tests/data/perf/native/bf16.txt.gz`,
  6.2 MB after gunzip, 4,439 samples) written again and again, each copy's timestamps shifted past the
  last copy's, so the samples (and their stacks) are the real file's and only their number grows;
- folded: the folded lines of FlameGraph's recorded results (`tests/data/perf/flamegraph/results`) and
  of the bf16 perf file folded by `perf_script.collapse(..., pid=True)`, each copy's leaf renamed
  (`leaf_K`), so every line is a distinct stack, as in a real large profile;
- vtune: the hand-written top-down fixture's tree (`tests/data/vtune/top_down_torch_cpu.csv`) under
  `Total`, repeated one level deeper under many parent functions (`worker_K_main`), one space more of
  indentation, its comma-holding name still quoted.
The generator and every measurement run in fresh subprocesses (ru_maxrss survives exec on Linux), so
the peak RSS printed is the reader's alone, beside the interpreter's with the reader imported; best of
--repeat by time, peak RSS the largest. The Kineto line reads the largest trace under tests/data/traces
(by JSON size after gunzip) with `read_trace` the same way. --profile adds each reader's cProfile top 8.
The default size is 50 MB, not 100: the default run takes ~2 minutes on 2 vCPUs (100 MB: ~3-4 minutes).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PERF_SOURCE = ROOT / "tests/data/perf/native/bf16.txt.gz"
FOLDED_RESULTS = ROOT / "tests/data/perf/flamegraph/results"
VTUNE_SOURCE = ROOT / "tests/data/vtune/top_down_torch_cpu.csv"
TRACES = ROOT / "tests/data/traces"
READERS = {
    "perf": "pinchpoint.ingest.perf_script.read_perf_script",
    "folded": "pinchpoint.ingest.stacks.read_folded",
    "vtune": "pinchpoint.ingest.vtune.read_vtune",
    "kineto": "pinchpoint.ingest.kineto.read_trace",
}
UNITS = {"perf": "samples", "folded": "lines", "vtune": "rows", "kineto": "events"}
_PERF_TIME = re.compile(r"^(\S.*?\s\d+(?:/\d+)?\s+(?:\[\d+\]\s+)?)(\d+)(\.\d+:)", re.ASCII)

CHILD = """
import importlib, json, resource, sys, time
from pathlib import Path
module, name = sys.argv[1].rsplit(".", 1)
read = getattr(importlib.import_module(module), name)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[3] == "profile":
    import cProfile, pstats
    prof = cProfile.Profile()
    out = prof.runcall(read, Path(sys.argv[2]))
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(8)
    dt = 0.0
else:
    t = time.perf_counter()
    out = read(Path(sys.argv[2]))
    dt = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if hasattr(out, "events"):
    res = {"stacks": len(out.events), "skipped": 0, "json_bytes": out.meta.trace_bytes}
else:
    res = {"stacks": len(out[0].samples), "skipped": out[1]}
print(json.dumps({"s": dt, "rss_kb": rss, "base_kb": base, **res}))
"""


def build_perf(out: Path, size_mb: float) -> int:
    """The bf16 perf script text copied until `size_mb`, timestamps shifted; returns the samples written."""
    blocks = [b for b in gzip.decompress(PERF_SOURCE.read_bytes()).decode().split("\n\n") if b.strip()]
    parts = []  # (before the seconds, seconds, the fraction and the rest of the block)
    for block in blocks:
        m = _PERF_TIME.match(block)
        if m is None:
            raise SystemExit(f"{PERF_SOURCE}: a sample header without a time: {block[:80]!r}")
        parts.append((m.group(1), int(m.group(2)), block[m.end(2) :] + "\n\n"))
    span = max(p[1] for p in parts) - min(p[1] for p in parts) + 1
    copy_bytes = sum(len(a) + len(c) + len(str(b)) for a, b, c in parts)
    copies = max(1, round(size_mb * 1e6 / copy_bytes))
    with out.open("w") as f:
        for k in range(copies):
            f.write("".join(f"{a}{b + k * span}{c}" for a, b, c in parts))
    return copies * len(parts)


def build_folded(out: Path, size_mb: float) -> int:
    """FlameGraph's folded results and the bf16 perf file folded, each copy's leaf renamed."""
    from pinchpoint.ingest.perf_script import collapse, format_collapsed, parse

    text = gzip.decompress(PERF_SOURCE.read_bytes()).decode()
    lines = format_collapsed(collapse(parse(text), pid=True)).splitlines()
    for path in sorted(FOLDED_RESULTS.glob("*-collapsed-*.txt")):
        lines += [line for line in path.read_text().splitlines() if line.strip()]
    parts = []  # (the stack up to the leaf's name, what follows the name)
    for stack, count in dict(line.rpartition(" ")[::2] for line in lines).items():  # one line a stack
        head, semi, leaf = stack.rpartition(";")
        name, paren, rest = leaf.partition(" (")
        parts.append((f"{head}{semi}{name}_", f"{paren}{rest} {count}\n"))
    copy_bytes = sum(len(a) + len(b) + 3 for a, b in parts)
    copies = max(1, round(size_mb * 1e6 / copy_bytes))
    with out.open("w") as f:
        for k in range(copies):
            f.write("".join(f"{a}{k}{b}" for a, b in parts))
    return copies * len(parts)


def build_vtune(out: Path, size_mb: float) -> int:
    """The top-down fixture's tree under `Total`, repeated one level deeper under distinct parents."""
    rows = list(csv.reader(VTUNE_SOURCE.read_text().splitlines()))
    header, total, tree = rows[0], rows[1], rows[2:]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows([" " + row[0], *row[1:]] for row in tree)
    subtree = buf.getvalue()
    parent = " worker_{}_main,{},0.010,libapp.so\n"
    copies = max(1, round(size_mb * 1e6 / (len(subtree) + len(parent) + 6)))
    with out.open("w") as f:
        f.write(",".join(header) + "\n")
        f.write(f"{total[0]},{copies * float(total[1]):.3f},{total[2]},{total[3]}\n")
        for k in range(copies):
            f.write(parent.format(k, total[1]) + subtree)
    return 1 + copies * (1 + len(tree))


def largest_kineto() -> tuple[Path, int]:
    """The trace under tests/data/traces with the most JSON (a gzip file's size from its trailer)."""

    def json_bytes(p: Path) -> int:
        if p.suffix != ".gz":
            return p.stat().st_size
        with p.open("rb") as f:
            f.seek(-4, 2)
            return int.from_bytes(f.read(4), "little")

    return max(((p, json_bytes(p)) for p in TRACES.rglob("*.json*")), key=lambda t: t[1])


def measure(fmt: str, path: Path, mode: str = "time") -> dict[str, float]:
    cmd = [sys.executable, "-c", CHILD, READERS[fmt], str(path), mode]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{fmt}: the reader failed on {path}:\n{res.stderr[-2000:]}")
    if mode == "profile":
        print("\n".join(line for line in res.stderr.splitlines() if line.strip()))
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def report(fmt: str, file_mb: float, units: int, runs: list[dict[str, float]]) -> None:
    best = min(runs, key=lambda r: r["s"])
    s, rss = best["s"], max(r["rss_kb"] for r in runs) / 1e3
    base = best["base_kb"] / 1e3
    print(
        f"{fmt:6s} {file_mb:6.1f} MB {s:6.2f} s {file_mb / s:6.1f} MB/s  {units / s / 1e3:7.1f} k {UNITS[fmt]}/s "
        f"({units:,} {UNITS[fmt]})  {int(best['stacks']):>9,} {'events' if fmt == 'kineto' else 'stacks'}  "
        f"peak RSS {rss:5.0f} MB  RSS/file {rss / file_mb:5.2f}  above the interpreter's {base:.0f} MB "
        f"{(rss - base) / file_mb:5.2f}" + (f"  ({int(best['skipped'])} skipped)" if best["skipped"] else ""),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=float, default=50.0, help="target size of each generated file (MB)")
    p.add_argument("--repeat", type=int, default=3, help="timed reads per format (fresh process each)")
    p.add_argument("--formats", default="perf,folded,vtune", help="comma-separated: perf,folded,vtune")
    p.add_argument("--no-kineto", action="store_true", help="skip the Kineto reader's comparison line")
    p.add_argument("--profile", action="store_true", help="print each reader's cProfile top 8 (tottime)")
    args = p.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    if unknown := set(formats) - {"perf", "folded", "vtune"}:
        p.error(f"unknown format(s): {', '.join(sorted(unknown))}")
    repeat = max(1, args.repeat)
    with tempfile.TemporaryDirectory(prefix="pinchpoint-stacks-bench-") as tmp:
        for fmt in formats:
            big = Path(tmp) / f"big.{fmt}.{'csv' if fmt == 'vtune' else 'txt'}"
            code = (
                f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import stack_readers as b; "
            )
            code += f"print(b.build_{fmt}(b.Path({str(big)!r}), {args.size_mb}))"
            built = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            units = int(built.stdout.strip())
            if args.profile:
                measure(fmt, big, "profile")
            runs = [measure(fmt, big) for _ in range(repeat)]
            report(fmt, big.stat().st_size / 1e6, units, runs)
            big.unlink()
    if not args.no_kineto:
        trace, json_bytes = largest_kineto()
        if args.profile:
            measure("kineto", trace, "profile")
        runs = [measure("kineto", trace) for _ in range(repeat)]
        report("kineto", json_bytes / 1e6, int(runs[0]["stacks"]), runs)
        print(f"  (kineto: {trace.relative_to(ROOT)}, MB of JSON after gunzip)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
