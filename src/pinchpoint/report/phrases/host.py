"""host.python (Python work in the loop), host.dispatch (per-op overhead) and the stack samples that name
the hot Python functions (`stacks.top`, also said by input.preprocess) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct


def _stacks(
    where: str, sampled_ns: float | None, samples: int, hot: tuple[tuple[str, float, str | None], ...]
) -> str:
    amount = f"{sampled_ns / 1e9:.1f} s" if sampled_ns is not None else f"{samples} samples"
    parts = []
    for label, share, calls_into in hot:
        inside = f", mostly inside {calls_into}" if calls_into else ""
        parts.append(f"{label} {pct(share)}{inside}")
    return f"Python stacks ({amount} of samples {where}): " + "; ".join(parts)


def _loop(inference: bool) -> str:
    return "inference loop" if inference else "training loop"


def _python_title(waiting: bool, inference: bool, served: bool = False) -> str:
    if served:
        return "The server's own Python between model calls (request handling)"
    if waiting:
        return f"The {_loop(inference)} waits outside the framework (sleep, I/O, a lock, a blocking call)"
    return f"Python work in the {_loop(inference)}, outside framework ops"


DISPATCH_FIXES = {
    "optimizer": (
        "Update all parameters at once: the optimizer's fused implementation does the whole step in "
        "one pass (torch.optim.AdamW(params, fused=True); Adam, SGD and Adagrad take it too), or "
        "foreach=True (a few ops per group of tensors) where fused is not offered.",
        "opt = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)",
    ),
    "serving": (
        "Give each op more work for its fixed cost: batch requests (many inputs per forward call: the "
        "per-op cost is paid once per batch, not per request), or compile the model (torch.compile) "
        "to fuse its ops.",
        "out = model(torch.cat(pending[:32]))   # one call for 32 queued requests, then split the rows",
    ),
    "compiled": (
        "The model already runs compiled: the overhead left is around its graphs (the loss, the "
        "optimizer, graph breaks, Python between calls). Give each op more work (a larger batch), "
        "compile the loss with the model, fuse the optimizer (fused=True), and look for graph breaks "
        "(TORCH_LOGS=graph_breaks).",
        "TORCH_LOGS=graph_breaks python train.py   # each break is a return to Python and eager ops",
    ),
    "ops": (
        "Issue fewer, larger ops: replace Python loops over heads/groups/timesteps with one batched "
        "op (torch.bmm, baddbmm, einsum, vectorised indexing), or compile the model (torch.compile) to "
        "fuse them.",
        "out = torch.einsum('bgi,gij->bgj', x, W)   # instead of: for g in range(G): x[:, g] @ W[g]",
    ),
}
"""host.dispatch's fix and snippet by remedy: an optimizer looping over its tensors, a server answering one
request per call, or a model issuing many small ops."""


def _dispatch_fix(remedy: str, optimizer_ns: float | None) -> str:
    tip = (
        ""
        if optimizer_ns is None
        else f" The optimizer's share ({ms(optimizer_ns)}) goes with its fused form: "
        "torch.optim.AdamW(params, fused=True)."
    )
    return DISPATCH_FIXES[remedy][0] + tip


PHRASES: dict[str, Callable[..., str]] = {
    "host.python.gc": lambda share: (
        f"{pct(share)} of the step is Python's garbage collector: left to host.gc"
    ),
    "host.python.idle_server": lambda share: (
        f"{pct(share)} of the time between model calls the server's main thread slept, waiting for requests: "
        "idle under this load, not counted"
    ),
    "stacks.top": _stacks,
    "host.python.title": _python_title,
    "host.python.outside": lambda share, outside_ns: (
        f"{pct(share)} of the step ({ms(outside_ns)}) is outside data "
        "loading, forward, backward and the optimizer step"
    ),
    "host.python.loose_ops": lambda share: (
        f"Of that, framework ops called outside a module (functional losses, tensor metrics) "
        f"take {pct(share)} of the step"
    ),
    "host.python.main_cpu": lambda cpu_share, computing: (
        f"The main thread is on a CPU {pct(cpu_share)} of the step: this is Python computing, not waiting"
        if computing
        else f"The main thread is on a CPU only {pct(cpu_share)} of the step"
    ),
    "host.python.where": lambda within: (
        f"in the loop ({within}), outside the phases" if within else "in the main thread, outside the phases"
    ),
    "host.python.asleep": lambda asleep_ns: (
        f"≈ {ms(asleep_ns)} of it the main thread is asleep (not on a CPU, not waiting for one, not in "
        "a data, communication or device wait): the loop blocks on something outside the framework"
    ),
    "host.python.unnamed": lambda: (
        "No stack samples, so the code is not named (`pinchpoint run --stacks` names the function and "
        "line): the fix below is the common cause of Python in a loop, not this program's measured one"
    ),
    "host.python.library": lambda library, function, share: (
        f"{pct(share)} of the loop's stack samples are inside {library}'s own code ({function}): "
        "the Python is the library's, not the loop's"
    ),
    "host.python.fix_server": lambda: (
        "Between model calls the server runs its own Python for each request (HTTP, validation, JSON, "
        "tokenizing) on the thread that calls the model: batching shares the model's cost, not this one. "
        "A faster JSON encoder, less per-request middleware, or tokenizing off that thread reduce it; "
        "more worker processes spread it where memory allows. No gain is predicted."
    ),
    "host.python.fix_library": lambda library: (
        f"No setting of the loop removes Python inside {library}: logging or metrics less often would not "
        f"help. Give each call more work (larger batches, fewer calls per step), see whether {library} "
        "has a faster path or compiles, or accept it: no gain is predicted."
    ),
    "host.python.fix": lambda waiting: (
        "Find the blocking call and take it off the step: `pinchpoint run --stacks` shows where the "
        "main thread sits; write logs, metrics and files from a background thread, and drop sleeps "
        "or polling in the loop."
        if waiting
        else "Keep per-step work on tensors: compute metrics with torch ops instead of .tolist() and "
        "Python loops, accumulate them on-device and log every N steps."
    ),
    "host.python.snippet": lambda waiting: (
        "pinchpoint run --stacks train.py   # flamegraph.svg: the frames under the loop"
        if waiting
        else "correct += (logits.argmax(1) == y).sum()   # tensor, no .tolist()\n"
        "if step % 50 == 0: log(correct.item() / seen)"
    ),
    "host.dispatch.ops": lambda ops, small_ops: (
        f"{ops:.0f} framework ops per step, {small_ops:.0f} of them on "
        "tensors too small for their math to matter"
    ),
    "host.dispatch.overhead": lambda inference, compute_ns, large_ns, overhead_ns, small_math_ns=0.0: (
        f"{'Forward' if inference else 'Forward, backward and optimizer'} take"
        f"{'s' if inference else ''} {ms(compute_ns)} per step; ops on large tensors "
        f"account for only {ms(large_ns)}"
        + (
            f", the small ops' own matrix math ≈ {ms(small_math_ns)} (at the best rate this program's "
            "matmuls reached: batching keeps it)"
            if small_math_ns >= 0.05 * compute_ns
            else ""
        )
        + f": ≈ {ms(overhead_ns)} is per-op overhead and Python glue"
    ),
    "host.dispatch.top_ops": lambda ops: "Most time: " + ", ".join(f"{name} ×{calls}" for name, calls in ops),
    "host.dispatch.compiled": lambda compiled_ns: (
        f"{ms(compiled_ns)} a step runs in torch.compile'd graphs: counted as the model's math, not overhead"
    ),
    "host.dispatch.issue_cost": lambda dispatch_ns: (
        f"Issuing even a 1-element op costs {dispatch_ns / 1e3:.1f} µs here (measured)"
    ),
    "host.dispatch.optimizer": lambda optimizer_ns, overhead_frac, fused_x: (
        f"{ms(optimizer_ns)} of it is in the optimizer step ({pct(overhead_frac)} of the overhead): "
        f"an optimizer that updates its parameters one tensor at a time; fused, est. ×{fused_x:.2f} alone"
    ),
    "host.dispatch.vector": lambda vector_ns, rows: (
        f"Its matmuls are matrix-vector products ({ms(vector_ns)} per step, "
        f"≤ {rows} rows): they read the weights, once per call however many rows it has"
    ),
    "host.dispatch.serving": lambda batch, request_ns, step_ns, speedup: (
        f"Served {batch} per call, each request would take ≈ {ms(request_ns)} instead of "
        f"{ms(step_ns)}: ×{speedup:.1f} the requests per second"
    ),
    "host.dispatch.fix": _dispatch_fix,
    "host.dispatch.snippet": lambda remedy: DISPATCH_FIXES[remedy][1],
}
