"""torch.compile's findings (compile.recompiles) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct


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
    "compile.recompiles.reason": lambda reason: f"The guard that failed first: {reason}",
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
}
