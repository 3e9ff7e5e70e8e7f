"""Reads a run directory (docs/run-directory.md) into a `Run`.

Tolerant by design: a program killed mid-write leaves a truncated last line or a missing file; those
become `Run.warnings`, not errors. Only a directory with no meta.json at all is refused.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pinchpoint.errors import RunDirError, TraceError
from pinchpoint.ingest import opwindow as opwindow_reader
from pinchpoint.ingest.stacks import read_folded
from pinchpoint.trace.run import (
    CpuInfo,
    CudaDevice,
    Environment,
    Fetch,
    GpuSample,
    Interval,
    LiveTensors,
    LoaderConfig,
    MatmulProbe,
    Phase,
    Probes,
    ProcessInfo,
    ProcSample,
    RankData,
    Role,
    Run,
    RunMeta,
    Step,
    StepKind,
    SystemSample,
    TensorGroup,
    ThreadSettings,
    TorchBuild,
)
from pinchpoint.trace.stacks import Stacks


def read_run_dir(path: Path) -> Run:
    if not path.is_dir():
        raise RunDirError(f"no run directory at {path}: pass the folder `pinchpoint run` wrote (-o)")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise RunDirError(f"{path} has no meta.json, so it is not a pinchpoint run directory")
    warnings: list[str] = []
    meta_obj = _load_json(meta_path, warnings)
    if not isinstance(meta_obj, dict):
        raise RunDirError(f"{meta_path} is not a JSON object; the run directory is damaged")
    meta = _meta(meta_obj)
    env_obj = _load_json(path / "environment.json", warnings)
    environment = _environment(env_obj if isinstance(env_obj, dict) else {})
    ranks = tuple(_rank(d, warnings) for _, d in rank_dirs(path))
    system = tuple(_system_sample(o) for o in _jsonl(path / "system.jsonl", warnings))
    stacks = _stacks(path, warnings)
    return Run(
        meta=meta,
        environment=environment,
        ranks=ranks,
        system=system,
        stacks=stacks,
        warnings=tuple(warnings),
    )


def _stacks(path: Path, warnings: list[str]) -> Stacks | None:
    """`stacks.folded` (py-spy), when the run asked for stacks; what went wrong otherwise."""
    meta = _load_json(path / "stacks.json", []) if (path / "stacks.json").is_file() else None
    if not isinstance(meta, dict):
        return None
    folded = path / "stacks.folded"
    if not folded.is_file() or folded.stat().st_size == 0:
        why = ""
        with contextlib.suppress(OSError):
            why = (path / "stacks.log").read_text(errors="replace").strip().splitlines()[-1]
        warnings.append(f"stacks were asked for but none were recorded{': ' + why if why else ''}")
        return None
    rate = meta.get("rate_hz")
    try:
        stacks, bad = read_folded(
            folded,
            rate_hz=float(rate) if isinstance(rate, (int, float)) and rate > 0 else None,
            source="py-spy",
        )
    except TraceError as exc:
        warnings.append(str(exc))
        return None
    if bad:
        warnings.append(f"{folded.name}: {bad} line(s) could not be read and were skipped")
    return stacks


def opwindow_file(rank_dir: Path) -> Path | None:
    """The rank's op-window trace (`opwindow.json`, or gzipped), or None."""
    for name in ("opwindow.json", "opwindow.json.gz"):
        if (rank_dir / name).is_file():
            return rank_dir / name
    return None


def rank_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(rank, directory) of every `ranks/rankN` in a run directory, by rank."""
    base = run_dir / "ranks"
    if not base.is_dir():
        return []
    found = [(_rank_number(d), d) for d in base.iterdir() if d.is_dir() and d.name.startswith("rank")]
    return sorted((r, d) for r, d in found if r >= 0)


def _rank_number(d: Path) -> int:
    m = re.fullmatch(r"rank(\d+)", d.name)
    return int(m.group(1)) if m else -1


def _load_json(path: Path, warnings: list[str]) -> Any:
    if not path.is_file():
        warnings.append(f"{path.name} is missing")
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        warnings.append(f"{path.name} could not be read ({exc.__class__.__name__})")
        return None


def _jsonl(path: Path, warnings: list[str]) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        return
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        warnings.append(f"{path.name} could not be read ({exc.strerror})")
        return
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            bad += 1
            continue
        if isinstance(obj, dict):
            yield obj
        else:
            bad += 1
    if bad:
        where = f"{path.parent.name}/{path.name}" if path.parent.name.startswith("rank") else path.name
        warnings.append(f"{where}: skipped {bad} unreadable line(s) (truncated write?)")


def _int(v: Any, default: int | None = None) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return int(v)
    return default


def _float(v: Any, default: float | None = None) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return default


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _meta(o: dict[str, Any]) -> RunMeta:
    clock = _dict(o.get("clock"))
    return RunMeta(
        command=tuple(str(c) for c in _list(o.get("command"))),
        started_at=str(o.get("started_at") or ""),
        cwd=str(o.get("cwd") or ""),
        wall_time_ns=_int(clock.get("wall_time_ns"), 0) or 0,
        monotonic_ns=_int(clock.get("monotonic_ns"), 0) or 0,
        ended_at=_str(o.get("ended_at")),
        exit_code=_int(o.get("exit_code")),
        signal=_str(o.get("signal")),
        world_size=_int(o.get("world_size"), 1) or 1,
        mode=str(o.get("mode") or "run"),
    )


def _environment(o: dict[str, Any]) -> Environment:
    cpu = _dict(o.get("cpu"))
    logical = _int(cpu.get("logical_cores"), 1) or 1
    return Environment(
        cpu=CpuInfo(
            model=str(cpu.get("model") or "unknown CPU"),
            logical_cores=logical,
            physical_cores=_int(cpu.get("physical_cores")),
            usable_cores=_int(cpu.get("usable_cores"), logical) or logical,
            flags=tuple(str(f) for f in _list(cpu.get("flags"))),
            matrix_units=tuple(str(f) for f in _list(cpu.get("matrix_units"))),
        ),
        memory_bytes=_int(o.get("memory_bytes")),
        os=str(o.get("os") or ""),
        python=str(o.get("python") or ""),
        hostname=str(o.get("hostname") or ""),
    )


def _rank(d: Path, warnings: list[str]) -> RankData:
    rank = _rank_number(d)
    device_ns: dict[int, int] = {}
    cuda_mem: dict[int, tuple[int | None, int | None]] = {}
    if (d / "device_steps.jsonl").is_file():
        for o in _jsonl(d / "device_steps.jsonl", warnings):
            n, ns = _int(o.get("step")), _int(o.get("device_ns"))
            if n is not None and ns is not None and ns >= 0:
                device_ns[n] = ns
                cuda_mem[n] = (_int(o.get("cuda_allocated")), _int(o.get("cuda_reserved")))
    steps = []
    for o in _jsonl(d / "steps.jsonl", warnings):
        step = _step(o)
        if step is not None:
            if step.index in device_ns:
                allocated, reserved = cuda_mem.get(step.index, (None, None))
                step = replace(
                    step,
                    device_ns=device_ns[step.index],
                    cuda_allocated_bytes=allocated,
                    cuda_reserved_bytes=reserved,
                )
            steps.append(step)
    processes = []
    for p in sorted(d.glob("process-*.json")):
        obj = _load_json(p, warnings)
        if isinstance(obj, dict):
            processes.append(_process(obj, rank))
    loaders = tuple(_loader(o) for o in _jsonl(d / "loaders.jsonl", warnings))
    fetches: list[Fetch] = []
    for f in sorted(d.glob("fetch-*.jsonl")):
        suffix = f.stem.split("-", 1)[1]
        pid = int(suffix) if suffix.isdigit() else 0
        for o in _jsonl(f, warnings):
            fetch = _fetch(o, pid)
            if fetch is not None:
                fetches.append(fetch)
    probes_obj = _load_json(d / "probes.json", warnings) if (d / "probes.json").is_file() else None
    window = None
    window_file = opwindow_file(d)
    if window_file is not None:
        probe_meta: dict[str, Any] = probes_obj if isinstance(probes_obj, dict) else {}
        clock_obj = probe_meta.get("clock")
        clock: dict[str, Any] = clock_obj if isinstance(clock_obj, dict) else {}
        offset = (_int(clock.get("wall_time_ns"), 0) or 0) - (_int(clock.get("monotonic_ns"), 0) or 0)
        try:
            window = opwindow_reader.read_opwindow(window_file, _int(probe_meta.get("window_steps")), offset)
        except (OSError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            warnings.append(f"rank{rank}/{window_file.name} could not be read ({exc.__class__.__name__})")
    return RankData(
        rank=rank,
        steps=tuple(steps),
        processes=tuple(processes),
        loaders=loaders,
        fetches=tuple(sorted(fetches, key=lambda f: f.start_ns)),
        opwindow=window,
        probes=_probes(probes_obj) if isinstance(probes_obj, dict) else Probes(),
    )


def _step(o: dict[str, Any]) -> Step | None:
    start, end = _int(o.get("start_ns")), _int(o.get("end_ns"))
    if start is None or end is None or end < start:
        return None
    intervals = []
    for item in _list(o.get("intervals")):
        if not (isinstance(item, list) and len(item) == 3):
            continue
        try:
            phase = Phase(item[0])
        except (ValueError, TypeError):
            continue
        s, e = _int(item[1]), _int(item[2])
        if s is not None and e is not None and e >= s:
            intervals.append(Interval(phase=phase, start_ns=s, end_ns=e))
    try:
        kind = StepKind(o.get("kind"))
    except (ValueError, TypeError):
        kind = StepKind.EXPLICIT
    return Step(
        index=_int(o.get("step"), 0) or 0,
        kind=kind,
        start_ns=start,
        end_ns=end,
        intervals=tuple(intervals),
        profiled=bool(o.get("profiled")),
        partial=bool(o.get("partial")),
        cpu_ns=_int(o.get("cpu_ns")),
        runq_ns=_int(o.get("runq_ns")),
        rss_bytes=_int(o.get("rss_bytes")),
        minor_faults=_int(o.get("minor_faults")),
    )


def _process(o: dict[str, Any], rank: int) -> ProcessInfo:
    t = o.get("torch")
    torch: TorchBuild | None = None
    devices: tuple[CudaDevice, ...] = ()
    if isinstance(t, dict):
        torch = TorchBuild(
            version=str(t.get("version") or "?"),
            cuda=_str(t.get("cuda")),
            hip=_str(t.get("hip")),
            mkl=t.get("mkl") if isinstance(t.get("mkl"), bool) else None,
            mkldnn=t.get("mkldnn") if isinstance(t.get("mkldnn"), bool) else None,
            openmp=t.get("openmp") if isinstance(t.get("openmp"), bool) else None,
            config_flags=tuple(str(f) for f in _list(t.get("config_flags"))),
        )
        devices = tuple(
            CudaDevice(
                name=str(dev.get("name") or "?"),
                capability=_str(dev.get("capability")),
                total_memory_bytes=_int(dev.get("total_memory_bytes")),
                multiprocessor_count=_int(dev.get("multiprocessor_count")),
            )
            for dev in _list(t.get("cuda_devices"))
            if isinstance(dev, dict)
        )
    th = _dict(o.get("threads"))
    env = _dict(th.get("env"))
    threads = ThreadSettings(
        intra_op=_int(th.get("intra_op")),
        inter_op=_int(th.get("inter_op")),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items() if v is not None)),
    )
    autocast_obj = _dict(o.get("autocast"))
    autocast = _str(autocast_obj.get("cpu")) or _str(autocast_obj.get("cuda"))
    try:
        role = Role(o.get("role"))
    except (ValueError, TypeError):
        role = Role.MAIN
    return ProcessInfo(
        pid=_int(o.get("pid"), 0) or 0,
        ppid=_int(o.get("ppid")),
        rank=rank,
        role=role,
        torch=torch,
        threads=threads,
        autocast_dtype=autocast,
        cuda_devices=devices,
    )


def _loader(o: dict[str, Any]) -> LoaderConfig:
    return LoaderConfig(
        t_ns=_int(o.get("t_ns"), 0) or 0,
        num_workers=_int(o.get("num_workers"), 0) or 0,
        pin_memory=bool(o.get("pin_memory")),
        prefetch_factor=_int(o.get("prefetch_factor")),
        persistent_workers=bool(o.get("persistent_workers")),
        batch_size=_int(o.get("batch_size")),
        dataset=str(o.get("dataset") or "?"),
        worker_pids=tuple(p for p in (_int(x) for x in _list(o.get("worker_pids"))) if p is not None),
    )


def _fetch(o: dict[str, Any], pid: int) -> Fetch | None:
    start, end, cpu = _int(o.get("start_ns")), _int(o.get("end_ns")), _int(o.get("cpu_ns"))
    if start is None or end is None or cpu is None or end < start:
        return None
    return Fetch(
        pid=pid,
        start_ns=start,
        end_ns=end,
        cpu_ns=max(0, cpu),
        runq_ns=_int(o.get("runq_ns")),
        worker_id=_int(o.get("worker_id")),
    )


def _live(o: Any) -> LiveTensors | None:
    if not isinstance(o, dict):
        return None
    count, nbytes, graph, graph_bytes = (
        _int(o.get(k)) for k in ("count", "bytes", "with_graph", "graph_bytes")
    )
    if count is None or nbytes is None or graph is None or graph_bytes is None:
        return None
    groups = []
    for item in _list(o.get("graph_groups")):
        g = _dict(item)
        shape = [_int(d) for d in _list(g.get("shape"))]
        n, b = _int(g.get("count")), _int(g.get("bytes"))
        if n is None or b is None or any(d is None for d in shape):
            continue
        groups.append(
            TensorGroup(
                shape=tuple(d for d in shape if d is not None), dtype=str(g.get("dtype")),
                grad_fn=str(g.get("grad_fn")), count=n, bytes=b,
            )
        )  # fmt: skip
    return LiveTensors(
        count=count, bytes=nbytes, with_graph=graph, graph_bytes=graph_bytes, graph_groups=tuple(groups)
    )


def _probes(o: dict[str, Any]) -> Probes:
    mm = []
    for item in _list(o.get("matmul")):
        m = _dict(item)
        dims = [_int(x) for x in _list(m.get("shape"))]
        ns = _int(m.get("ns"))
        if len(dims) == 3 and ns is not None and ns > 0:
            a, b, c = (d or 0 for d in dims)
            if min(a, b, c) > 0:
                mm.append(MatmulProbe(shape=(a, b, c), dtype=str(m.get("dtype")), ns=ns))
    fault_ns = _int(o.get("page_fault_ns"))
    bw = o.get("memory_bytes_per_s")
    live = _dict(o.get("live_tensors"))
    return Probes(
        live_before=_live(live.get("before")),
        live_after=_live(live.get("after")),
        window_steps=_int(live.get("steps")),
        dispatch_ns_per_op=_int(o.get("dispatch_ns_per_op")),
        matmul=tuple(mm),
        page_fault_ns=fault_ns if fault_ns is not None and fault_ns > 0 else None,
        memory_bytes_per_s=float(bw)
        if isinstance(bw, (int, float)) and math.isfinite(bw) and bw > 0
        else None,
    )


def _system_sample(o: dict[str, Any]) -> SystemSample:
    procs = []
    for p in _list(o.get("procs")):
        if not isinstance(p, dict):
            continue
        procs.append(
            ProcSample(
                pid=_int(p.get("pid"), 0) or 0,
                ppid=_int(p.get("ppid")),
                name=str(p.get("name") or ""),
                user_s=_float(p.get("user_s"), 0.0) or 0.0,
                sys_s=_float(p.get("sys_s"), 0.0) or 0.0,
                rss_bytes=_int(p.get("rss_bytes"), 0) or 0,
                threads=_int(p.get("threads"), 0) or 0,
                ctx_vol=_int(p.get("ctx_vol")),
                ctx_invol=_int(p.get("ctx_invol")),
                read_bytes=_int(p.get("read_bytes")),
                write_bytes=_int(p.get("write_bytes")),
            )
        )
    gpus = tuple(
        GpuSample(
            index=_int(g.get("index"), 0) or 0,
            util_percent=_float(g.get("util_percent")),
            mem_used_bytes=_int(g.get("mem_used_bytes")),
            mem_total_bytes=_int(g.get("mem_total_bytes")),
            power_w=_float(g.get("power_w")),
        )
        for g in _list(o.get("gpus"))
        if isinstance(g, dict)
    )
    return SystemSample(
        t_ns=_int(o.get("t_ns"), 0) or 0,
        cpu_percent_per_core=tuple(
            c for c in (_float(x) for x in _list(o.get("cpu_percent_per_core"))) if c is not None
        ),
        procs=tuple(procs),
        gpus=gpus,
    )
