"""A short op window over a few steps, then micro-benchmarks of this machine.

The window records framework ops with shapes and dtypes for `steps` steps starting at step `start`
and writes them as a Chrome trace (`opwindow.json`). On a CPU program the recorder is the op census
(`opcensus`: a TorchDispatchMode, which leaves nothing behind); on a CUDA program it is
`torch.profiler` with CPU and CUDA activities, whose kernels and copies `pinchpoint report` analyses
like `pinchpoint analyze` would (`--kineto` asks for it on CPU too). Right after, in the same process
and with the program's own thread settings, it measures what one framework op costs to dispatch and,
on CPU, what the window's heaviest matmul costs in fp32 vs bf16 (`probes.json`). Steps inside the
window are marked `profiled` and left out of timing statistics.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pinchpoint.capture import machine_probes, opcensus
from pinchpoint.capture.environment import native_bf16
from pinchpoint.capture.envnames import RECORDER_ENV
from pinchpoint.capture.loader_probe import probe_worker_transfer
from pinchpoint.capture.writer import write_json_atomic

FAULTS_PROBED = 64
"""Minor faults per window step below which the page-fault probe is skipped (~60 ms): a program that
maps so few fresh pages has no churn to price (memory.pressure starts at 256 a step)."""
MATMUL_PROBE_BUDGET_NS = 200_000_000
"""Upper bound on the time the matmul probe may take (it shrinks the shape to fit)."""


DEFAULT_OPWINDOW = (10, 3)
"""After warm-up and after enough untouched steps to see the program as it runs without a profiler
(the profiler's own allocations can change how glibc treats the program's memory afterwards)."""


def parse_window(spec: str | None) -> tuple[int, int] | None:
    """$PINCHPOINT_OPWINDOW: "START:STEPS", "off" (None), else the default."""
    if spec is None or spec == "":
        return DEFAULT_OPWINDOW
    if spec == "off":
        return None
    try:
        start, steps = spec.split(":")
        return int(start), max(1, int(steps))
    except ValueError:
        return DEFAULT_OPWINDOW


class OpWindow:
    def __init__(self, rank_dir: Path, spec: tuple[int, int] | None) -> None:
        self.rank_dir = rank_dir
        self.spec = spec
        self.prof: Any = None
        self.census: opcensus.Census | None = None
        self.active = False
        self.done = spec is None
        self.on_cuda = False
        """The program had initialised CUDA when the window began: kernels and copies are recorded too."""
        self._step_range: Any = None
        self.batch_spec: list[tuple[list[int], str]] | None = None
        """Shapes and dtypes of the program's first batch (fetched in the training process or received
        from a worker): the loader probe passes one like it through a worker."""
        self.autocast_bf16 = False
        """The program autocasts to bf16 (the agent says so at each step end): the bf16 probes run."""
        self.faults0: int | None = None
        """The process's minor faults when the window began."""
        self.asked = False
        """Opened on request (`pinchpoint capture`): it records the steps asked for, whatever pinchpoint's
        budget (`shorten` leaves it alone)."""

    def disable(self) -> None:
        self.done = True
        self.active = False
        self.prof = None
        if self.census is not None:
            with contextlib.suppress(Exception):
                self.census.stop()
            self.census = None
        self._step_range = None

    def on_step_end(self, torch: Any, next_step: int, autocast_bf16: bool = False) -> bool:
        """Start or stop the window at a step boundary. True when that took time that belongs to no step:
        the recorder starting, the probes when it stops."""
        if self.done or self.spec is None or torch is None:
            return False
        self.autocast_bf16 = self.autocast_bf16 or autocast_bf16
        start, steps = self.spec
        if not self.active and next_step == start:
            self._start(torch)
            self._mark_step(torch, next_step)
            return True
        if self.active and next_step >= start + steps:
            self.stop(torch)
            return True
        if self.active:
            self._mark_step(torch, next_step)
        return False

    def shorten(self, next_step: int) -> None:
        """End an open window at the boundary before `next_step` (pinchpoint's budget is spent, the
        recorder made its steps that slow): the steps it recorded stand; probes.json says how many."""
        if self.active and not self.asked and self.spec is not None and next_step > self.spec[0]:
            self.spec = (self.spec[0], min(self.spec[1], next_step - self.spec[0]))

    def _mark_step(self, torch: Any, step: int) -> None:
        """Close the previous step's `ProfilerStep#N` range and open this one's (N = pinchpoint's step
        index), so the trace carries its steps like one from `torch.profiler` with a schedule."""
        if self.prof is None:
            return
        self._close_step()
        with contextlib.suppress(Exception):
            rf = torch.profiler.record_function(f"ProfilerStep#{step}")
            rf.__enter__()
            self._step_range = rf

    def _close_step(self) -> None:
        rf, self._step_range = self._step_range, None
        if rf is not None:
            with contextlib.suppress(Exception):
                rf.__exit__(None, None, None)

    def _start(self, torch: Any) -> None:
        self.on_cuda = _cuda_in_use(torch)
        self.faults0 = machine_probes.minor_faults()
        if (
            not self.on_cuda
            and os.environ.get(RECORDER_ENV, "census") != "kineto"
            and opcensus.available(torch)
        ):
            try:
                self.census = opcensus.Census(torch)
                self.census.start()
                self.active = True
            except Exception:
                self.disable()
            return
        try:
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if self.on_cuda:
                activities.append(ProfilerActivity.CUDA)
                # Without teardown Kineto leaves CUPTI subscribed after the window, and every later
                # kernel launch pays for it (measured on an H200: +7 µs a launch, a launch-bound step
                # 32% slower for the rest of the run). torch itself sets 0 when CUDA graphs need it.
                os.environ.setdefault("TEARDOWN_CUPTI", "1")
            # Recording scalar arguments' values ("Concrete Inputs") is what makes Kineto costly on
            # a CPU training step: the window's steps ran x1.42-1.78 with it and x1.06-1.33 without
            # (healthy.py, 11 runs each; benchmarks/README.md). The analysis reads shapes and dtypes.
            _record_concrete_inputs(torch, False)
            self.prof = profile(activities=activities, record_shapes=True)
            with _quiet_stderr():
                self.prof.__enter__()
            self.active = True
        except Exception:
            _record_concrete_inputs(torch, True)
            self.disable()

    def stop(self, torch: Any) -> None:
        if self.active and self.census is not None:
            self._stop_census(torch)
            return
        if not self.active or self.prof is None:
            return
        self._close_step()
        prof, self.prof = self.prof, None
        self.active = False
        self.done = True
        with contextlib.suppress(Exception):
            try:
                with _quiet_stderr():
                    prof.__exit__(None, None, None)
            finally:
                _record_concrete_inputs(torch, True)
            self.rank_dir.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.rank_dir / "opwindow.json"))
            # On a CUDA program the matmuls run on the device: a CPU matmul probe would answer the
            # wrong question (the device's ceilings come from `pinchpoint calibrate`).
            shape = None if self.on_cuda else _heaviest_matmul(prof)
            probes = run_probes(torch, shape, self.batch_spec, bf16=self._bf16(), faults=self._faults_per_step())
            probes["device"] = "cuda" if self.on_cuda else "cpu"
            probes["window_steps"] = self.spec[1] if self.spec else None
            # Kineto stamps events in wall-clock time (baseTimeNanoseconds + ts); this pair maps
            # them onto the monotonic clock of the step records.
            probes["clock"] = {"wall_time_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}
            write_json_atomic(self.rank_dir / "probes.json", probes)

    def _stop_census(self, torch: Any) -> None:
        census, self.census = self.census, None
        self.active = False
        self.done = True
        if census is None:
            return
        with contextlib.suppress(Exception):
            events = census.stop()
            self.rank_dir.mkdir(parents=True, exist_ok=True)
            opcensus.write_trace(self.rank_dir / "opwindow.json", events)
            probes = run_probes(
                torch,
                opcensus.heaviest_matmul(events),
                self.batch_spec,
                opcensus.heaviest_conv(events),
                bf16=self._bf16(),
                faults=self._faults_per_step(),
            )
            probes["device"] = "cpu"
            probes["recorder"] = "census"
            probes["window_steps"] = self.spec[1] if self.spec else None
            probes["clock"] = {"wall_time_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()}
            write_json_atomic(self.rank_dir / "probes.json", probes)

    def _faults_per_step(self) -> float | None:
        """Minor faults per window step (the recorder's own are few: Python lists)."""
        if self.faults0 is None or not self.spec or self.spec[1] <= 0:
            return None
        return (machine_probes.minor_faults() - self.faults0) / self.spec[1]

    def _bf16(self) -> bool:
        """Time bf16 too: only where the CPU multiplies bf16 natively or the program autocasts to it (on
        a CPU that emulates bf16 an fp32 program's heaviest matmul in bf16 took 57 s of its run, and no
        finding reads it there)."""
        return self.autocast_bf16 or native_bf16()


def _record_concrete_inputs(torch: Any, on: bool) -> None:
    """Kineto's recording of scalar arguments' values: off for the window, back to torch's default after."""
    with contextlib.suppress(Exception):
        torch._C._profiler._set_record_concrete_inputs_enabled_val(on)


def _cuda_in_use(torch: Any) -> bool:
    """True when the program has initialised CUDA (asking does not initialise it)."""
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Kineto prints `profiler_start`/`profiler_stop` lines to fd 2; the program's stderr must not change."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _heaviest_matmul(prof: Any) -> tuple[int, int, int] | None:
    """(M, K, N) of the matmul op with the most total CPU time in a Kineto window (the census's rule,
    fed with the profiler's events)."""
    events: list[opcensus.Event] = [
        (ev.name, 0, int(ev.cpu_time_total * 1000), 0, [], [list(d) for d in (ev.input_shapes or []) if d])
        for ev in prof.events()
        if ev.name in opcensus.MATMUL_OPS
    ]
    return opcensus.heaviest_matmul(events)


def run_probes(
    torch: Any,
    shape: tuple[int, int, int] | None,
    batch_spec: list[tuple[list[int], str]] | None = None,
    conv: tuple[list[int], list[int]] | None = None,
    *,
    bf16: bool = True,
    faults: float | None = None,
) -> dict[str, Any]:
    """`faults`: minor faults per window step (None: not known, probe anyway)."""
    out: dict[str, Any] = {
        "dispatch_ns_per_op": None,
        "matmul": [],
        "page_fault_ns": None,
        "memory_bytes_per_s": None,
        "loader_transfer": None,
    }
    if batch_spec:  # the program loads in its training process: what would a worker cost?
        with contextlib.suppress(Exception):
            out["loader_transfer"] = probe_worker_transfer(torch, batch_spec)
    with contextlib.suppress(Exception):  # (each probe and the cache guard themselves; this guards the rest)
        out.update(machine_probes.measure(torch, faults is None or faults >= FAULTS_PROBED))
    out["window_faults_per_step"] = round(faults) if faults is not None else None
    if shape is not None:
        with contextlib.suppress(Exception):
            out["matmul"] = _probe_matmul(torch, shape, bf16)
    if conv is not None:
        with contextlib.suppress(Exception):
            out["conv"] = _probe_conv(torch, *conv, bf16=bf16)
    return out


def _probe_conv(torch: Any, x_dims: list[int], w_dims: list[int], bf16: bool = True) -> list[dict[str, Any]]:
    """The window's heaviest 2-D convolution, forward, in fp32 and in bf16 (stride 1, 'same' padding:
    the census keeps shapes, not strides; the bf16/fp32 ratio is what the finding reads)."""
    n, c, h, w = x_dims
    k = w_dims[2]
    if w_dims[1] != c or n * c * h * w > (64 << 20):
        return []
    results = []
    with torch.no_grad():
        x = torch.full(x_dims, 0.5)
        wt = torch.full(w_dims, 0.25)
        conv2d = torch.nn.functional.conv2d
        fp32 = _median_ns(lambda: conv2d(x, wt, padding=k // 2))
        results.append({"input": x_dims, "weight": w_dims, "dtype": "float32", "ns": fp32})
        if not bf16:
            return results
        xd, wd = x.to(torch.bfloat16), wt.to(torch.bfloat16)
        timed = _slow_dtype_ns(fp32, n, lambda rows: conv2d(xd[:rows], wd, padding=k // 2))
        results.append({"input": x_dims, "weight": w_dims, "dtype": "bfloat16", **timed})
    return results


def _probe_matmul(torch: Any, shape: tuple[int, int, int], bf16: bool = True) -> list[dict[str, Any]]:
    m, k, n = shape
    results = []
    with torch.no_grad():
        # Constant operands: the probe must not draw from the program's random generators (that
        # would change its data order and results); matmul time does not depend on the values.
        a = torch.full((m, k), 0.5)
        b = torch.full((k, n), 0.25)
        fp32 = _median_ns(lambda: torch.mm(a, b))
        results.append({"shape": [m, k, n], "dtype": "float32", "ns": fp32})
        if not bf16:
            return results
        x, y = a.to(torch.bfloat16), b.to(torch.bfloat16)
        results.append(
            {
                "shape": [m, k, n],
                "dtype": "bfloat16",
                **_slow_dtype_ns(fp32, m, lambda rows: torch.mm(x[:rows], y)),
            }
        )
    return results


SCALE_ROWS = 8
"""bf16 is timed on 1/8 of the rows first: emulated (no bf16 units) it runs ~40x slower than fp32, and
one full call took 0.5-0.9 s of the program's time here."""
SLOW_X = 4.0


WHOLE_CALL_NS = 10_000_000
EMULATED_X = 200
"""A call whose fp32 time, `EMULATED_X` times slower (bf16 emulated: x177 seen on an AVX2 EPYC), stays
under `WHOLE_CALL_NS` is timed whole: a 1/8 slice of a small matmul times oneDNN's kernel choice, not
the math (on the avx512_bf16 EPYC a 80x16x32 bf16 slice read 62 µs on its second call, 20 µs on its
fourth; the whole 640-row call 19 µs warm): scaled x8 it made bf16 read x50 slower than fp32."""


def _slow_dtype_ns(fp32_ns: int, rows: int, call: Any) -> dict[str, Any]:
    """A lower-precision call's time: on a fraction of the rows when that fraction, scaled up, is
    already `SLOW_X` × fp32 (the precision cannot pay here, the exact factor does not matter), else on
    all of them. `rows_timed` says which. A small call is timed whole (`WHOLE_CALL_NS`)."""
    if fp32_ns * EMULATED_X <= WHOLE_CALL_NS:
        return {"ns": _median_ns(lambda: call(rows))}
    part = max(1, rows // SCALE_ROWS)
    if part < rows:
        scaled = _once_ns(call, part) * rows // part
        if scaled >= SLOW_X * fp32_ns:
            # The first call also chose and compiled its kernel: 1.5-9 ms for a 128-row bf16 matmul
            # that runs in 0.2 ms warm, on the avx512_bf16 EPYC, where x8 made a native bf16 read
            # x22 slower than fp32 in one run of three. Slow again warm, it is slow.
            scaled = min(scaled, _once_ns(call, part) * rows // part)
        if scaled >= SLOW_X * fp32_ns:
            return {"ns": int(scaled), "rows_timed": part}
    return {"ns": _median_ns(lambda: call(rows))}


def _once_ns(call: Any, rows: int) -> int:
    t0 = time.perf_counter_ns()
    call(rows)
    return time.perf_counter_ns() - t0


def _median_ns(call: Any) -> int:
    """Median time of `call`, repeated within half the probe budget. The first call (kernel choice,
    JIT) sets the count: per dtype, because bf16 emulated on a CPU without bf16 units runs ~40x
    slower than fp32 (an AVX2 EPYC: 0.5 s for a 1024x256x1024 matmul); a call that alone takes half
    the budget is measured once."""
    t0 = time.perf_counter_ns()
    call()
    first = max(1, time.perf_counter_ns() - t0)
    reps = min(10, MATMUL_PROBE_BUDGET_NS // (2 * first))
    if reps < 2:
        return first
    times = []
    for _ in range(int(reps)):
        t0 = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - t0)
    times.sort()
    return int(times[len(times) // 2])
