"""pinchpoint's GPU time breakdown against HTA 0.5's `get_temporal_breakdown`, on every trace in a folder.

    python benchmarks/hta_compare.py /work/shared/traces [--hta-python /tmp/hta-venv/bin/python]

HTA runs in its own throwaway venv (see benchmarks/README.md) through `_hta_runner.py`, each file alone as
rank 0, with `include_last_profiler_step=True` and `HTA_DISABLE_NS_ROUNDING=1`: the whole trace, exact
timestamps. Its results are cached under `--cache` (HTA takes seconds per file).

The three numbers map one to one: HTA's idle = span minus the union of every row it sees (ours: `idle`),
its compute = union of compute rows (ours: `compute`), its non-compute = the rest of the union (ours:
`communication + memory`). Where they differ, the script explains the difference from the data, by
moving from HTA's event set and labels to ours in three steps and measuring each step's effect:

1. rows HTA counts that are not GPU work (`cuda_sync` events, annotations with a stream) are dropped;
2. GPU work HTA's step filter dropped (kernels whose launch is not a CPU op inside a ProfilerStep) is added;
3. HTA's kernel labels are replaced by ours (e.g. `multimem_all_reduce_kernel` is compute for HTA).

Step 0 checks that our interval arithmetic on HTA's own rows and labels reproduces HTA's numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pinchpoint.analysis.gpu import intervals as iv
from pinchpoint.analysis.gpu.breakdown import gpu_breakdown
from pinchpoint.analysis.gpu.idle import NO_LAUNCH, launch_start_ns
from pinchpoint.analysis.gpu.kernels import GpuWork, classify
from pinchpoint.ingest.kineto import read_trace
from pinchpoint.trace.kineto import EventTable, Kind

Mask = np.ndarray[Any, np.dtype[np.bool_]]

RUNNER = Path(__file__).with_name("_hta_runner.py")
GPU_WORK_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
EXPLAIN_PP = 0.05
"""Steps that move any of the three numbers by at least this many percentage points are listed."""


@dataclass(frozen=True)
class Three:
    """Idle, compute, non-compute in percent of the span."""

    idle: float
    compute: float
    non_compute: float

    def minus(self, o: Three) -> Three:
        return Three(self.idle - o.idle, self.compute - o.compute, self.non_compute - o.non_compute)

    def worst(self) -> float:
        return max(abs(self.idle), abs(self.compute), abs(self.non_compute))

    def fmt(self) -> str:
        return f"{self.idle:.2f} / {self.compute:.2f} / {self.non_compute:.2f}"

    def fmt_delta(self) -> str:
        return f"idle {self.idle:+.2f}, compute {self.compute:+.2f}, non-compute {self.non_compute:+.2f} pp"


def three(start: np.ndarray[Any, Any], end: np.ndarray[Any, Any], compute: np.ndarray[Any, Any]) -> Three:
    """HTA's three numbers for a set of rows: span from the first start to the last end."""
    span = int(end.max() - start.min())
    busy = iv.total((start, end))
    comp = iv.total((start[compute], end[compute]))
    return Three(100 * (span - busy) / span, 100 * comp / span, 100 * (busy - comp) / span)


def run_hta(path: Path, hta_python: str, cache: Path, root: Path) -> dict[str, Any]:
    out = cache / (str(path.relative_to(root)).replace("/", "__") + ".json")
    if not out.exists():
        env = {**os.environ, "HTA_DISABLE_NS_ROUNDING": "1"}
        res = subprocess.run(
            [hta_python, str(RUNNER), str(path)], capture_output=True, text=True, env=env, check=True
        )
        out.write_text(res.stdout)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def hta_kernel_types(names: list[str], hta_python: str) -> dict[str, str]:
    res = subprocess.run(
        [hta_python, str(RUNNER), "--kernel-types"],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        check=True,
    )
    types: dict[str, str] = json.loads(res.stdout)
    return types


def _dropped_note(ev: EventTable, gpu: Mask, missing: Mask) -> str:
    """Why HTA's filter dropped GPU events: classify them by where (and whether) their launch is."""
    launch = launch_start_ns(ev)[gpu]
    dur = (ev.end_ns - ev.start_ns)[gpu]
    steps = (ev.kind == Kind.USER_ANNOTATION) & ev.mask_names(lambda s: s.startswith("ProfilerStep#"))
    host = np.isin(ev.kind, (Kind.RUNTIME, Kind.DRIVER)) & (ev.correlation >= 0)
    first_corr = int(ev.correlation[host].min()) if host.any() else 0
    corr = ev.correlation[gpu]
    before = missing & (launch == NO_LAUNCH) & (corr >= 0) & (corr < first_corr)
    parts = []
    if before.any():
        t0 = int(ev.start_ns.min())
        parts.append(
            f"{int(before.sum())} have no launch in the trace and correlation ids "
            f"{int(corr[before].min())}–{int(corr[before].max())}, below the first launch's ({first_corr}): "
            f"queued before the profiler started, they ran {ms(int(dur[before].sum()))} between "
            f"{ms(int(ev.start_ns[gpu][before].min()) - t0)} and {ms(int(ev.end_ns[gpu][before].max()) - t0)} "
            f"into the trace"
        )
    last_step_end = int(ev.end_ns[steps].max()) if steps.any() else np.iinfo(np.int64).max
    after = missing & (launch != NO_LAUNCH) & (launch > last_step_end)
    if after.any():
        parts.append(f"{int(after.sum())} ({ms(int(dur[after].sum()))}) launched after the last ProfilerStep")
    rest = missing & ~before & ~after
    if rest.any():
        parts.append(f"{int(rest.sum())} others ({ms(int(dur[rest].sum()))})")
    return (
        f"HTA drops {int(missing.sum())} of {int(gpu.sum())} GPU events ({ms(int(dur[missing].sum()))} of "
        f"{ms(int(dur.sum()))} GPU time) whose launch is not a CPU op of the kept steps: " + "; ".join(parts)
    )


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def compare(path: Path, hta: dict[str, Any], hta_python: str) -> dict[str, Any]:
    trace = read_trace(path)
    ev = trace.events
    ours_bd = gpu_breakdown(ev)
    assert ours_bd is not None, f"{path}: no GPU work"
    ours = Three(100 * ours_bd.idle, 100 * ours_bd.compute, 100 * ours_bd.non_compute)
    t = hta.get("temporal")
    if t is None:
        return {
            "ours": ours,
            "hta": None,
            "notes": [f"HTA fails: {hta.get('temporal_error')}"],
            "bd": ours_bd,
        }
    span_us = t["kernel_time(us)"]
    hta3 = Three(
        *(100 * t[k] / span_us for k in ("idle_time(us)", "compute_time(us)", "non_compute_time(us)"))
    )

    work = classify(ev)
    gpu = work >= 0
    g_start, g_end, g_corr = ev.start_ns[gpu], ev.end_ns[gpu], ev.correlation[gpu]
    g_name = np.array(ev.names, dtype=object)[ev.name[gpu]]
    rows = hta["rows"]
    h_start_us, h_dur_us = np.array(rows["ts_us"]), np.array(rows["dur_us"])
    h_start = np.round(h_start_us * 1000).astype(np.int64)
    h_end = np.round((h_start_us + h_dur_us) * 1000).astype(np.int64)
    h_name, h_cat = np.array(rows["name"], dtype=object), np.array(rows["cat"], dtype=object)
    h_corr = np.array(rows["correlation"], dtype=np.int64)
    # HTA shifts its clock so the trace starts at 0 (and keeps µs); line its rows up with ours by correlation.
    h_work = np.isin(h_cat, list(GPU_WORK_CATS))
    common, gi, hi = np.intersect1d(g_corr, h_corr[h_work], return_indices=True)
    offset = int(np.median(g_start[gi] - h_start[np.flatnonzero(h_work)[hi]])) if common.size else 0
    h_start, h_end = h_start + offset, h_end + offset

    types = hta_kernel_types(sorted(set(g_name.tolist()) | set(h_name.tolist())), hta_python)
    h_comp = np.array([types[n] == "COMPUTATION" for n in h_name], dtype=bool)
    g_comp_hta = np.array([types[n] == "COMPUTATION" for n in g_name], dtype=bool)
    g_comp_ours = work[gpu] == GpuWork.COMPUTE

    e0 = three(h_start, h_end, h_comp)
    e1 = three(h_start[h_work], h_end[h_work], h_comp[h_work])
    e2 = three(g_start, g_end, g_comp_hta)
    notes: list[str] = []
    repro = e0.minus(hta3)
    if repro.worst() >= 0.01:
        notes.append(f"our arithmetic on HTA's rows misses HTA by {repro.fmt_delta()}")

    d1 = e1.minus(e0)
    if (~h_work).any():
        extra = ~h_work
        by = Counter(zip(h_cat[extra].tolist(), h_name[extra].tolist(), h_comp[extra].tolist(), strict=True))
        dur = {k: 0 for k in by}
        for c, n, comp, d in zip(
            h_cat[extra], h_name[extra], h_comp[extra], (h_end - h_start)[extra], strict=True
        ):
            dur[(c, n, comp)] += int(d)
        what = "; ".join(
            f'{cnt} `{c}` "{n}" ({ms(dur[(c, n, comp)])}, HTA: {"compute" if comp else "non-compute"})'
            for (c, n, comp), cnt in by.most_common(4)
        )
        notes.append(f"HTA counts rows that are not GPU work: {what} → {d1.fmt_delta()}")

    d2 = e2.minus(e1)
    missing = ~np.isin(g_corr, h_corr[h_work]) | (g_corr < 0)
    if missing.any():
        notes.append(_dropped_note(ev, gpu, missing) + f" → {d2.fmt_delta()}")

    d3 = ours.minus(e2)
    differ = g_comp_hta != g_comp_ours
    if differ.any():
        names = Counter(g_name[differ].tolist())
        dur_by: Counter[str] = Counter()
        for n, d in zip(g_name[differ], (g_end - g_start)[differ], strict=True):
            dur_by[n] += int(d)
        what = "; ".join(
            f"{cnt}× `{n[:60]}` ({ms(dur_by[n])}; HTA: {'compute' if types[n] == 'COMPUTATION' else types[n].lower()})"
            for n, cnt in names.most_common(3)
        )
        notes.append(f"labels differ: {what} → {d3.fmt_delta()}")
    overlap_hta = hta.get("comm_comp_overlap_pctg")
    return {"ours": ours, "hta": hta3, "notes": notes, "bd": ours_bd, "overlap_hta": overlap_hta}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace_dir", type=Path)
    ap.add_argument("--hta-python", default="/tmp/hta-venv/bin/python")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/hta-cache"))
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    root = args.trace_dir.resolve()
    print(
        "| trace | ours idle / compute / non-compute % | HTA % | max abs diff pp | comm overlap ours / HTA % | why they differ |"
    )
    print("|---|---|---|---|---|---|")
    for path in sorted(root.rglob("*.json.gz")):
        hta = run_hta(path, args.hta_python, args.cache, root)
        r = compare(path, hta, args.hta_python)
        ours, h3 = r["ours"], r["hta"]
        diff = ours.minus(h3).worst() if h3 is not None else float("nan")
        ov = r["bd"].comm_overlap
        ov_s = f"{100 * ov:.2f}" if ov is not None else "-"
        ovh = r.get("overlap_hta")
        ovh_s = f"{ovh:.2f}" if isinstance(ovh, float) else "-"
        notes = " ".join(f"({i + 1}) {n}" for i, n in enumerate(r["notes"])) or "agree"
        print(
            f"| {path.relative_to(root)} | {ours.fmt()} | {h3.fmt() if h3 else 'fails'} | {diff:.2f} "
            f"| {ov_s} / {ovh_s} | {notes} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
