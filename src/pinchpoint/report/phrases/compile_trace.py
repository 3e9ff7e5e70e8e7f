"""torch.compile read from a profiler trace (`rules/gpu_compile.py`) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct
from pinchpoint.report.report_doc import ReportDoc


def _frames(frames: tuple[int, ...]) -> str:
    return ("frame " if len(frames) == 1 else "frames ") + ", ".join(map(str, frames))


PHRASES: dict[str, Callable[..., str]] = {
    "compile.trace.recompiles": lambda recompiles, frames, ids, ns, share, steps: (
        f"{recompiles} recompilations while the profiler recorded ({', '.join(ids)}"
        + (", …" if recompiles > len(ids) else "")
        + f"; {_frames(frames)}), in {steps} of the steps: {ms(ns)}, {pct(share)} of the profiled steps "
        "(dynamo's compile ranges in the trace; `Torch-Compiled Region: X/Y` with Y > 0 is frame X's "
        "Y-th recompile)"
    ),
    "compile.trace.recompiles.priced": lambda mean_ns, saved_ns: (
        f"Priced as one compilation like them ({ms(mean_ns)}, their mean) in their place, once the guard "
        f"that fails no longer does: {ms(saved_ns)} less over the profiled steps"
    ),
    "compile.trace.resumed": lambda frames: (
        f"{_frames(frames).capitalize()} ran inside another frame's compiled region: where dynamo resumed "
        "after a graph break. Such a frame is guarded on what the break read (a `.item()` value, a "
        "Python number): a new value recompiles it"
    ),
    "compile.trace.fell_back": lambda frame, compile, step, limit: (
        f"Frame {frame}'s compilation {compile} never ran and the frame ran no compiled code after it"
        + (f" (from step {step} on)" if step >= 0 else "")
        + f": dynamo gave up on it (its recompile limit, {limit} by default) and it runs eagerly now"
    ),
    "compile.trace.recompiles.fix": lambda resumed: (
        "Run once with TORCH_LOGS=recompiles: it names the guard that failed each time. "
        + (
            f"For {_frames(resumed)}, where a graph break resumed, remove the break (keep the value on "
            "the tensor: torch.where instead of `if x.item()`), so nothing is read into Python to guard on. "
            if resumed
            else ""
        )
        + "For a size: torch.compile(model) with dynamic=None (the default) or dynamic=True, "
        "torch._dynamo.mark_dynamic(x, dim), or inputs padded to a few bucket sizes."
    ),
    "compile.trace.recompiles.snippet": lambda: (
        "TORCH_LOGS=recompiles python train.py   # names each failing guard\n"
        "model = torch.compile(model)             # not dynamic=False, where sizes vary"
    ),
    "compile.trace.breaks": lambda breaks, calls, steps, inside_ns, around_ns, step_ns: (
        f"In the {steps} steps that compiled nothing, a step entered {calls:.0f} compiled graphs, "
        f"{breaks:.0f} of them resumed inside another frame's region (a graph break); {ms(inside_ns)} of "
        f"the {ms(step_ns)} step ran inside the graphs, {ms(around_ns)} around them (the eager code at the "
        "breaks, dynamo's guards, the wrappers)"
    ),
    "note.trace_compiling": lambda ns, share, steps: (
        f"the trace holds {ms(ns)} of first compilations ({pct(share)} of the profiled time"
        + (f"; steps {', '.join(map(str, steps[:8]))}" if steps else "")
        + "): it caught torch.compile's warm-up, so its steps are not the steady ones; profile after a few "
        "steps (torch.profiler.schedule(wait=..., warmup=...)). For a short job that compiles every time, "
        "keep the compiler's cache (TORCHINDUCTOR_CACHE_DIR on storage that outlives the run)"
    ),
    "note.trace_recompiled_before": lambda regions: (
        f"compiled region{'s' if len(regions) > 1 else ''} {', '.join(regions)} ran: X/Y with Y > 0 is frame "
        "X's Y-th recompile, made before the trace started; TORCH_LOGS=recompiles names the guards that failed"
    ),
    "compile.trace.breaks.fix": lambda: (
        "Find the breaking line with TORCH_LOGS=graph_breaks (or torch.compile(model, fullgraph=True), "
        "which raises at it), then keep values on the tensor (no `.item()`, torch.where for a branch) and "
        "move prints and logging outside the compiled function."
    ),
}


def compiled_lines(report: ReportDoc) -> list[str]:
    """What each rank's trace says of torch.compile: regions, compilations, breaks, graph launches."""
    lines = []
    for g in report.gpu or ():
        c = g.compiled
        if c is None:
            continue
        who = f"rank {g.rank}: " if len(report.gpu or ()) > 1 else ""
        if c.regions or c.compilations:
            calls = sum(r.calls for r in c.regions)
            shown = ", ".join(f"{r.region} ×{r.calls}" for r in c.regions[:8])
            more = ", …" if len(c.regions) > 8 else ""
            n = len(c.regions)
            text = f"{who}{n} compiled region{'s' * (n != 1)} ran {calls} time{'s' * (calls != 1)} ({shown}{more})"
            if c.compilations:
                text += f"; {c.compilations} compilation{'s' * (c.compilations != 1)} in the trace "
                text += f"({c.recompilations} recompiles), {c.compiling_ms:.1f} ms"
            if c.graph_breaks:
                frames = ", ".join(map(str, c.resumed_frames))
                text += f"; {c.graph_breaks} regions resumed after a graph break (frame {frames})"
            if c.fell_back:
                text += f"; back to eager after {', '.join(c.fell_back)}"
            if c.cache_lookups:
                text += f"; {c.cache_lookups} guard check{'s' * (c.cache_lookups != 1)}, {c.cache_lookup_ms:.2f} ms"
            lines.append(text)
        if c.graph_launches:
            lines.append(
                f"{who}{c.graph_launches} graph launches replayed {c.graph_kernels} kernels "
                f"({c.graph_kernel_ms:.1f} ms of GPU time, counted as the kernels they are above)"
            )
    return lines
