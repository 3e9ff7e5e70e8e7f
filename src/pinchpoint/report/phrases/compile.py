"""torch.compile's findings (compile.recompiles, compile.graph_breaks, compile.time) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct

SCALARS = "TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1"


def _s(ns: float) -> str:
    return f"{ns / 1e9:.1f} s"


def _sizes(sizes: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, sizes[:10]))
    return shown + (f", … ({len(sizes)} sizes)" if len(sizes) > 10 else "")


PHRASES: dict[str, Callable[..., str]] = {
    "compile.recompiles.count": lambda recompiles, compiles, ns, share, frame: (
        f"{frame} was compiled {compiles} times: {recompiles} recompiles took {ms(ns)}, {pct(share)} of the "
        "run's loop (dynamo's own compilation records)"
    ),
    "compile.recompiles.varying": lambda tensor, dim, sizes: (
        f"The guard that failed: the size of {tensor} at dimension {dim} changed from call to call "
        f"({_sizes(sizes)}); each new size compiled the graph again"
    ),
    "compile.recompiles.reason": lambda reason: (
        f"The guard that failed first: {' '.join(reason.partition(chr(10))[0].split())}"
    ),
    "compile.recompiles.priced": lambda mean_ns, saved_ns: (
        f"Priced as one more compilation like them ({ms(mean_ns)}, their mean), of a graph dynamic in that "
        f"dimension, in their place: {ms(saved_ns)} less"
    ),
    "compile.recompiles.limit": lambda limit: (
        f"The frame hit torch._dynamo.config.recompile_limit ({limit}): on sizes it has not seen it now runs "
        "eagerly, without a word beyond one warning (not priced)"
    ),
    "compile.recompiles.fix": lambda tensor, dim: (
        (f"Let dimension {dim} of {tensor} be dynamic: " if tensor else "Let the varying sizes be dynamic: ")
        + "torch.compile(model) with dynamic=None (the default: the second size compiles one dynamic graph) "
        "or dynamic=True, or torch._dynamo.mark_dynamic(x, dim) before the call; or pad inputs to a few "
        "bucket sizes, each compiled once."
    ),
    "compile.recompiles.snippet": lambda dim: (
        "model = torch.compile(model)  # not dynamic=False: the second size compiles a dynamic graph\n"
        f"# or, where sizes must stay static elsewhere: torch._dynamo.mark_dynamic(x, {dim}) before model(x)"
    ),
    "compile.recompiles.value": lambda frame, site, recompiles, ns, share: (
        f"{frame}, the code after a graph break, was compiled {recompiles + 1} times ({recompiles} "
        f"recompiles), once for each new value read into Python at {site}: its compilations took {_s(ns)}, "
        f"{pct(share)} of the run's loop (dynamo's own compilation records)"
    ),
    "compile.recompiles.value_priced": lambda saved_ns: (
        f"Priced as all of that frame's compilations gone ({_s(saved_ns)}): without the break the code is "
        "part of the one graph compiled once; what it adds to that graph's compilation is not priced"
    ),
    "compile.recompiles.value_limit": lambda limit: (
        f"It hit torch._dynamo.config.recompile_limit ({limit}): the code after the break runs eagerly from "
        "then on, with one warning in the log (not priced: its compiled speed was never seen in steady steps)"
    ),
    "compile.recompiles.value_fix": lambda site: (
        f"Keep the value on the tensor at {site}: a branch becomes torch.where(cond, a, b) (or torch.cond), "
        "a threshold check a tensor op, so nothing is read into Python and nothing is guarded on it. "
        "dynamic=True or mark_dynamic do not help: no size changes. Where the value must reach Python, "
        "read it outside the compiled function."
    ),
    "compile.recompiles.value_snippet": lambda: (
        "# before: if h.abs().mean().item() > LIMIT: h = h * 0.5\n"
        "h = torch.where(h.abs().mean() > LIMIT, h * 0.5, h)"
    ),
    "compile.graph_breaks.sites": lambda sites, reason: (
        f"dynamo broke the compiled code at {', '.join(sites)} (the lines it resumed at, its records): "
        f"{reason}"
    ),
    "compile.graph_breaks.graphs": lambda calls, inside_ns, around_ns, step_ns: (
        f"A step entered {calls} compiled graphs, forward and backward, {ms(inside_ns)} inside them; "
        f"{ms(around_ns)} of the {ms(step_ns)} step went around them (Python, dynamo's guards, the "
        "autograd wrappers, the eager code at the breaks)"
    ),
    "compile.graph_breaks.priced": lambda whole, saved_ns: (
        f"Priced as that time shrinking with the graphs entered to {whole} a step (one forward and one "
        f"backward per compiled frame): {ms(saved_ns)} less; fusion across the breaks is not priced"
    ),
    "compile.graph_breaks.fix": lambda site, item: (
        f"Change the line that breaks the graph ({site}): "
        + (
            "keep the value on the tensor instead of reading it into Python with .item() (tensor "
            f"arithmetic, torch.where for a branch), or let dynamo trace it ({SCALARS}, or "
            "torch._dynamo.config.capture_scalar_outputs = True). "
            if item
            else "move prints and logging outside the compiled function, and branches on tensor values "
            "into torch.where or torch.cond. "
        )
        + "torch.compile(model, fullgraph=True) raises at each break left."
    ),
    "compile.time.run": lambda compiling_ns, wall_ns, compiles, backend_ns: (
        f"Compiling took {_s(compiling_ns)} of the {_s(wall_ns)} run ({pct(compiling_ns / max(1, wall_ns))}, "
        f"{compiles} compiled frame{'s' if compiles != 1 else ''}); {_s(backend_ns)} of it in the backend "
        "(AOTAutograd, inductor's code generation and C++ compiles, forward and backward), which a cache hit "
        "replaces with a load (dynamo's own records)"
    ),
    "compile.time.cache": lambda misses, hits, directory: (
        f"The caches were on and missed {misses} times, hit {hits}: nothing compiled before was found in "
        f"{directory}"
    ),
    "compile.time.priced": lambda keeps, saved_ns: (
        f"Priced as those backend compilations loaded from the cache instead ({pct(keeps)} of their time "
        f"kept for the load): {_s(saved_ns)} less a run; dynamo still traces the model every run"
    ),
    "compile.time.fix": lambda directory: (
        f"Keep the compiler's cache where the next run finds it: the cache lived in {directory}, which a "
        "container, a CI job or a fresh node starts without. Point TORCHINDUCTOR_CACHE_DIR at storage that "
        "outlives the run (a persistent volume, a shared filesystem), or save the mega-cache after a run "
        "(torch.compiler.save_cache_artifacts()) and load it before the next (load_cache_artifacts()). "
        "If this was the first run of this code on this machine with the default directory, the next one "
        "hits by itself."
    ),
    "compile.time.snippet": lambda: (
        "TORCHINDUCTOR_CACHE_DIR=/persistent/inductor-cache python train.py   # every run after the first "
        "loads its graphs"
    ),
    "compile.graph_breaks.snippet": lambda item: (
        (
            "scale = h.abs().amax()           # not .item(): the value stays in the graph\n"
            "h = h / (1.0 + scale / LIMIT)\n"
            f"# or, no code changed: {SCALARS} python train.py"
        )
        if item
        else "model = torch.compile(model, fullgraph=True)  # raises at the first break: the line to change"
    ),
}
