"""Reads a run directory (docs/run-directory.md) into a `Run`.

Tolerant by design: a program killed mid-write leaves a truncated last line or a missing file; those
become `Run.warnings`, not errors. Only a directory with no meta.json at all is refused.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pinchpoint.errors import RunDirError
from pinchpoint.ingest import opwindow as opwindow_reader
from pinchpoint.ingest.compiles import FILE as COMPILE_FILE
from pinchpoint.ingest.compiles import compile_record, mark_compiling
from pinchpoint.ingest.context import context_cost
from pinchpoint.ingest.fields import as_dict, as_float, as_int, as_list, as_str, jsonl, load_json
from pinchpoint.ingest.gc_file import gc_record
from pinchpoint.ingest.parallel import fsdp_config, pipeline_config, tensor_parallel_config
from pinchpoint.ingest.probes import LIVE_FILE, read_probes
from pinchpoint.ingest.run_stacks import run_native, run_stacks
from pinchpoint.ingest.served import batch_costs, other_calls, served_load
from pinchpoint.ingest.steps_jsonl import step_record
from pinchpoint.ingest.trials import (
    ALLOC_TRIAL_FILE,
    CUT_FILE,
    TRIAL_FILE,
    WORKER_TRIAL_FILE,
    alloc_trial,
    thread_trial,
    trial_cut,
    worker_trial,
)
from pinchpoint.trace.run import (
    Attach,
    CpuInfo,
    CudaDevice,
    DdpConfig,
    Environment,
    Fetch,
    Framework,
    FrameworkName,
    GpuSample,
    LoaderConfig,
    LoopSite,
    Probes,
    ProcessInfo,
    ProcSample,
    RankData,
    Role,
    Run,
    RunMeta,
    SystemSample,
    ThreadSettings,
    TorchBuild,
)


def read_run_dir(path: Path) -> Run:
    if not path.is_dir():
        raise RunDirError(f"no run directory at {path}: pass the folder `pinchpoint run` wrote (-o)")
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise RunDirError(f"{path} has no meta.json, so it is not a pinchpoint run directory")
    warnings: list[str] = []
    meta_obj = load_json(meta_path, warnings)
    if not isinstance(meta_obj, dict):
        raise RunDirError(f"{meta_path} is not a JSON object; the run directory is damaged")
    meta = _meta(meta_obj)
    env_obj = load_json(path / "environment.json", warnings)
    environment = _environment(env_obj if isinstance(env_obj, dict) else {})
    ranks = tuple(_rank(d, warnings) for _, d in rank_dirs(path))
    # The launcher reads the world size off a torchrun command line; ranks started otherwise
    # (torch.multiprocessing.spawn) show in their folders and in DDP's own record.
    world = max([meta.world_size, len(ranks)] + [c.world_size for r in ranks for c in r.ddp])
    if world != meta.world_size:
        meta = replace(meta, world_size=world)
    system = tuple(system_sample(o) for o in jsonl(path / "system.jsonl", warnings))
    stacks = run_stacks(path, warnings)
    native = run_native(path, warnings)
    served = served_load(path, warnings)
    return Run(
        meta=meta,
        environment=environment,
        ranks=ranks,
        system=system,
        stacks=stacks,
        native=native,
        warnings=tuple(warnings),
        served=served,
    )


def opwindow_file(rank_dir: Path) -> Path | None:
    """The rank's op-window trace (`opwindow.json`, or gzipped), or None."""
    for name in ("opwindow.json", "opwindow.json.gz"):
        if (rank_dir / name).is_file():
            return rank_dir / name
    return None


def opwindow_documents(run_dir: Path) -> dict[int, Any]:
    """rank -> its op window's trace as JSON (what `export --format perfetto` embeds)."""
    windows = {}
    for rank, d in rank_dirs(run_dir):
        f = opwindow_file(d)
        if f is not None:
            try:
                raw = f.read_bytes()
                windows[rank] = json.loads(gzip.decompress(raw) if f.suffix == ".gz" else raw)
            except (OSError, ValueError) as exc:
                raise RunDirError(f"{f} could not be read ({exc.__class__.__name__})") from exc
    return windows


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


def _meta(o: dict[str, Any]) -> RunMeta:
    clock = as_dict(o.get("clock"))
    return RunMeta(
        command=tuple(str(c) for c in as_list(o.get("command"))),
        started_at=str(o.get("started_at") or ""),
        cwd=str(o.get("cwd") or ""),
        wall_time_ns=as_int(clock.get("wall_time_ns"), 0) or 0,
        monotonic_ns=as_int(clock.get("monotonic_ns"), 0) or 0,
        ended_at=as_str(o.get("ended_at")),
        ended_ns=as_int(o.get("ended_ns")),
        exit_code=as_int(o.get("exit_code")),
        signal=as_str(o.get("signal")),
        world_size=as_int(o.get("world_size"), 1) or 1,
        mode=str(o.get("mode") or "run"),
        attach=_attach(o.get("attach")),
    )


def _attach(o: Any) -> Attach | None:
    if not isinstance(o, dict):
        return None
    detached = as_dict(o.get("detached"))
    left = [*as_list(detached.get("not_restored")), *as_list(detached.get("inert_hooks"))]
    return Attach(
        pid=as_int(o.get("pid"), 0) or 0,
        duration_s=as_float(o.get("duration_s"), 0.0) or 0.0,
        ended=as_str(o.get("ended")),
        restored=as_int(detached.get("patches")) if detached else None,
        left=tuple(str(x) for x in left),
    )


def _environment(o: dict[str, Any]) -> Environment:
    cpu = as_dict(o.get("cpu"))
    logical = as_int(cpu.get("logical_cores"), 1) or 1
    return Environment(
        cpu=CpuInfo(
            model=str(cpu.get("model") or "unknown CPU"),
            logical_cores=logical,
            physical_cores=as_int(cpu.get("physical_cores")),
            usable_cores=as_int(cpu.get("usable_cores"), logical) or logical,
            flags=tuple(str(f) for f in as_list(cpu.get("flags"))),
            matrix_units=tuple(str(f) for f in as_list(cpu.get("matrix_units"))),
        ),
        memory_bytes=as_int(o.get("memory_bytes")),
        os=str(o.get("os") or ""),
        python=str(o.get("python") or ""),
        hostname=str(o.get("hostname") or ""),
    )


def _device_steps(
    d: Path, warnings: list[str]
) -> tuple[dict[int, int], dict[int, tuple[int | None, int | None]]]:
    """device_steps.jsonl (a CUDA program's): each step's device time, and its CUDA memory (allocated,
    reserved), by step."""
    device_ns: dict[int, int] = {}
    cuda_mem: dict[int, tuple[int | None, int | None]] = {}
    if (d / "device_steps.jsonl").is_file():
        for o in jsonl(d / "device_steps.jsonl", warnings):
            n, ns = as_int(o.get("step")), as_int(o.get("device_ns"))
            if n is not None and ns is not None and ns >= 0:
                device_ns[n] = ns
                cuda_mem[n] = (as_int(o.get("cuda_allocated")), as_int(o.get("cuda_reserved")))
    return device_ns, cuda_mem


def _rank(d: Path, warnings: list[str]) -> RankData:
    rank = _rank_number(d)
    device_ns, cuda_mem = _device_steps(d, warnings)
    steps = []
    for o in jsonl(d / "steps.jsonl", warnings):
        step = step_record(o)
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
        obj = load_json(p, warnings)
        if isinstance(obj, dict):
            processes.append(_process(obj, rank))
    loaders = tuple(_loader(o) for o in jsonl(d / "loaders.jsonl", warnings))
    fetches: list[Fetch] = []
    for f in sorted(d.glob("fetch-*.jsonl")):
        suffix = f.stem.split("-", 1)[1]
        pid = int(suffix) if suffix.isascii() and suffix.isdigit() else 0
        for o in jsonl(f, warnings):
            fetch = _fetch(o, pid)
            if fetch is not None:
                fetches.append(fetch)
    probes_obj = load_json(d / "probes.json", warnings) if (d / "probes.json").is_file() else None
    if (d / LIVE_FILE).is_file():  # the live-tensor snapshots, taken once memory rose (`LeakWatch`)
        live = load_json(d / LIVE_FILE, warnings)
        probes_obj = {**(probes_obj if isinstance(probes_obj, dict) else {}), "live_tensors": live}
    window = None
    window_file = opwindow_file(d)
    if window_file is not None:
        probe_meta: dict[str, Any] = probes_obj if isinstance(probes_obj, dict) else {}
        clock_obj = probe_meta.get("clock")
        clock: dict[str, Any] = clock_obj if isinstance(clock_obj, dict) else {}
        offset = (as_int(clock.get("wall_time_ns"), 0) or 0) - (as_int(clock.get("monotonic_ns"), 0) or 0)
        try:
            window = opwindow_reader.read_opwindow(
                window_file, as_int(probe_meta.get("window_steps")), offset
            )
        except (OSError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            warnings.append(f"rank{rank}/{window_file.name} could not be read ({exc.__class__.__name__})")
    compiles = compile_record(load_json(d / COMPILE_FILE, warnings) if (d / COMPILE_FILE).is_file() else None)
    return RankData(
        rank=rank,
        steps=mark_compiling(steps, compiles),
        processes=tuple(processes),
        loaders=loaders,
        fetches=tuple(sorted(fetches, key=lambda f: f.start_ns)),
        opwindow=window,
        probes=read_probes(probes_obj) if isinstance(probes_obj, dict) else Probes(),
        ddp=_ddp(distributed := list(jsonl(d / "distributed.jsonl", warnings))),
        fsdp=fsdp_config(distributed),
        pipeline=pipeline_config(distributed),
        tensor_parallel=tensor_parallel_config(distributed),
        thread_trial=thread_trial(
            load_json(d / TRIAL_FILE, warnings) if (d / TRIAL_FILE).is_file() else None
        ),
        alloc_trial=alloc_trial(
            load_json(d / ALLOC_TRIAL_FILE, warnings) if (d / ALLOC_TRIAL_FILE).is_file() else None
        ),
        worker_trial=worker_trial(
            load_json(d / WORKER_TRIAL_FILE, warnings) if (d / WORKER_TRIAL_FILE).is_file() else None
        ),
        trial_cut=trial_cut(load_json(d / CUT_FILE, warnings) if (d / CUT_FILE).is_file() else None),
        gc=gc_record(load_json(d / "gc.json", warnings) if (d / "gc.json").is_file() else None),
        compiles=compiles,
        batch_costs=batch_costs(d, warnings),
        other_calls=other_calls(d, warnings),
        context_cost=context_cost(d, warnings),
    )


def _process(o: dict[str, Any], rank: int) -> ProcessInfo:
    t = o.get("torch")
    torch: TorchBuild | None = None
    devices: tuple[CudaDevice, ...] = ()
    if isinstance(t, dict):
        torch = TorchBuild(
            version=str(t.get("version") or "?"),
            cuda=as_str(t.get("cuda")),
            hip=as_str(t.get("hip")),
            mkl=t.get("mkl") if isinstance(t.get("mkl"), bool) else None,
            mkldnn=t.get("mkldnn") if isinstance(t.get("mkldnn"), bool) else None,
            openmp=t.get("openmp") if isinstance(t.get("openmp"), bool) else None,
            config_flags=tuple(str(f) for f in as_list(t.get("config_flags"))),
        )
        devices = tuple(
            CudaDevice(
                name=str(dev.get("name") or "?"),
                capability=as_str(dev.get("capability")),
                total_memory_bytes=as_int(dev.get("total_memory_bytes")),
                multiprocessor_count=as_int(dev.get("multiprocessor_count")),
            )
            for dev in as_list(t.get("cuda_devices"))
            if isinstance(dev, dict)
        )
    th = as_dict(o.get("threads"))
    env = as_dict(th.get("env"))
    threads = ThreadSettings(
        intra_op=as_int(th.get("intra_op")),
        inter_op=as_int(th.get("inter_op")),
        env=tuple(sorted((str(k), str(v)) for k, v in env.items() if v is not None)),
    )
    autocast_obj = as_dict(o.get("autocast"))
    autocast = as_str(autocast_obj.get("cpu")) or as_str(autocast_obj.get("cuda"))
    try:
        role = Role(o.get("role"))
    except (ValueError, TypeError):
        role = Role.MAIN
    return ProcessInfo(
        pid=as_int(o.get("pid"), 0) or 0,
        ppid=as_int(o.get("ppid")),
        rank=rank,
        role=role,
        torch=torch,
        threads=threads,
        autocast_dtype=autocast,
        cuda_devices=devices,
        loop=_loop(as_dict(o.get("loop"))),
        framework=_framework(as_dict(o.get("framework"))),
    )


def _framework(o: dict[str, Any]) -> Framework | None:
    try:
        name = FrameworkName(o.get("name"))
    except (ValueError, TypeError):
        return None
    settings = as_dict(o.get("settings"))
    return Framework(
        name=name,
        version=as_str(o.get("version")),
        settings=tuple(
            sorted(
                (str(k), v)
                for k, v in settings.items()
                if v is None or isinstance(v, (str, int, float, bool))
            )
        ),
        via=as_str(o.get("via")) or "stack",
    )


def _loop(o: dict[str, Any]) -> LoopSite | None:
    first, last = as_int(o.get("first_line")), as_int(o.get("last_line"))
    file, function = as_str(o.get("file")), as_str(o.get("function"))
    if first is None or last is None or not file or not function or last < first:
        return None
    return LoopSite(
        file=file,
        function=function,
        qualname=as_str(o.get("qualname")) or function,
        first_line=first,
        last_line=last,
    )


def _loader(o: dict[str, Any]) -> LoaderConfig:
    return LoaderConfig(
        t_ns=as_int(o.get("t_ns"), 0) or 0,
        num_workers=as_int(o.get("num_workers"), 0) or 0,
        pin_memory=bool(o.get("pin_memory")),
        prefetch_factor=as_int(o.get("prefetch_factor")),
        persistent_workers=bool(o.get("persistent_workers")),
        batch_size=as_int(o.get("batch_size")),
        dataset=str(o.get("dataset") or "?"),
        worker_pids=tuple(p for p in (as_int(x) for x in as_list(o.get("worker_pids"))) if p is not None),
        serial=as_int(o.get("serial")),
        site=as_str(o.get("site")),
    )


def _ddp(lines: Iterable[dict[str, Any]]) -> tuple[DdpConfig, ...]:
    """DDP models in construction order; a `comm_hook` line names the hook of the model before it."""
    out: list[DdpConfig] = []
    for o in lines:
        if o.get("kind") == "comm_hook" and out:
            out[-1] = replace(out[-1], comm_hook=as_str(o.get("hook")))
        elif o.get("kind") == "ddp":
            out.append(
                DdpConfig(
                    t_ns=as_int(o.get("t_ns"), 0) or 0,
                    backend=str(o.get("backend") or "?"),
                    world_size=as_int(o.get("world_size"), 1) or 1,
                    devices=tuple(str(d) for d in as_list(o.get("devices"))),
                    params=as_int(o.get("params"), 0) or 0,
                    grad_bytes=as_int(o.get("grad_bytes"), 0) or 0,
                    bucket_cap_bytes=as_int(o.get("bucket_cap_bytes")),
                    find_unused_parameters=bool(o.get("find_unused_parameters")),
                    static_graph=bool(o.get("static_graph")),
                    gradient_as_bucket_view=bool(o.get("gradient_as_bucket_view")),
                )
            )
    return tuple(out)


def _fetch(o: dict[str, Any], pid: int) -> Fetch | None:
    start, end, cpu = as_int(o.get("start_ns")), as_int(o.get("end_ns")), as_int(o.get("cpu_ns"))
    if start is None or end is None or cpu is None or end < start:
        return None
    return Fetch(
        pid=pid,
        start_ns=start,
        end_ns=end,
        cpu_ns=max(0, cpu),
        runq_ns=as_int(o.get("runq_ns")),
        worker_id=as_int(o.get("worker_id")),
    )


def system_sample(o: dict[str, Any]) -> SystemSample:
    """One line of system.jsonl as a SystemSample."""
    procs = []
    for p in as_list(o.get("procs")):
        if not isinstance(p, dict):
            continue
        procs.append(
            ProcSample(
                pid=as_int(p.get("pid"), 0) or 0,
                ppid=as_int(p.get("ppid")),
                name=str(p.get("name") or ""),
                user_s=as_float(p.get("user_s"), 0.0) or 0.0,
                sys_s=as_float(p.get("sys_s"), 0.0) or 0.0,
                rss_bytes=as_int(p.get("rss_bytes"), 0) or 0,
                threads=as_int(p.get("threads"), 0) or 0,
                ctx_vol=as_int(p.get("ctx_vol")),
                ctx_invol=as_int(p.get("ctx_invol")),
                read_bytes=as_int(p.get("read_bytes")),
                write_bytes=as_int(p.get("write_bytes")),
                runq_s=as_float(p.get("runq_s")),
                cuser_s=as_float(p.get("cuser_s")),
            )
        )
    gpus = tuple(
        GpuSample(
            index=as_int(g.get("index"), 0) or 0,
            util_percent=as_float(g.get("util_percent")),
            mem_used_bytes=as_int(g.get("mem_used_bytes")),
            mem_total_bytes=as_int(g.get("mem_total_bytes")),
            power_w=as_float(g.get("power_w")),
        )
        for g in as_list(o.get("gpus"))
        if isinstance(g, dict)
    )
    return SystemSample(
        t_ns=as_int(o.get("t_ns"), 0) or 0,
        cpu_percent_per_core=tuple(
            c for c in (as_float(x) for x in as_list(o.get("cpu_percent_per_core"))) if c is not None
        ),
        machine_user_s=as_float(o.get("cpu_user_s")),
        tool_user_s=as_float(tool.get("user_s")) if isinstance(tool := o.get("tool"), dict) else None,
        tool_sys_s=as_float(tool.get("sys_s")) if isinstance(tool, dict) else None,
        procs=tuple(procs),
        gpus=gpus,
    )
