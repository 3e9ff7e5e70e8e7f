"""How `pinchpoint try` applies each kind of fix (`FixKind`): one entry per kind, read by `try_fix`.

An entry gives the ways pinchpoint applies a finding's fix from its `fix_params` (the launcher's
environment and what `$PINCHPOINT_TRY` asks the agent: `capture/appliers.py`), or says why it cannot:
then the finding's snippet shows the change in the program's code. A new appliable fix is one entry
here, one applier there, and its test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pinchpoint.diagnosis.finding import FixKind
from pinchpoint.diagnosis.rules.memory import GLIBC_FIX
from pinchpoint.trace.trials import GLIBC_ENV, GLIBC_MMAP_THRESHOLD, GLIBC_TRIM_THRESHOLD

Params = Mapping[str, int]
"""A finding's `fix_params`."""
AgentAsk = Mapping[str, object]
"""What `$PINCHPOINT_TRY` asks the agent (JSON values; `capture/appliers.py` reads them)."""

CODE = "the fix needs a change in the program's code: the snippet shows it"


@dataclass(frozen=True, slots=True, kw_only=True)
class Way:
    """One way to apply a fix: what is changed, short, and how."""

    fix: str
    how: str
    env: Mapping[str, str] = field(default_factory=dict)
    agent: AgentAsk = field(default_factory=dict)
    cannot: str | None = None
    """Why this way cannot be tried here (a preload not installed): listed, not run."""
    whole_run: bool = False
    """What it changes is the whole run (compilations), not the steady steps: timed on full runs."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fix:
    ways: Callable[[Params], tuple[Way, ...]] | None = None
    """The ways, from the finding's `fix_params` (none: the parameters it needs are missing)."""
    cannot: str = CODE
    """Why pinchpoint cannot apply it, when there is no way."""


def _always(*ways: Way) -> Callable[[Params], tuple[Way, ...]]:
    return lambda params: ways


def _by_agent(fix: str, how: str, **agent: object) -> Fix:
    """A fix the agent applies from its kind alone."""
    return Fix(ways=_always(Way(fix=fix, how=how, agent=agent)))


def _capture_scalars(params: Params) -> tuple[Way, ...]:
    """Where a `.item()` broke the graph: dynamo traces it into the graph instead."""
    if not params.get("item"):
        return ()
    return (
        Way(
            fix="capture_scalar_outputs",
            how="TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS=1: dynamo traces Tensor.item() into the graph",
            env={"TORCHDYNAMO_CAPTURE_SCALAR_OUTPUTS": "1"},
        ),
    )


def _threads(params: Params) -> tuple[Way, ...]:
    n = params.get("threads")
    if not isinstance(n, int):
        return ()
    how = f"OMP_NUM_THREADS={n}; torch.set_num_threads held at {n} by the agent"
    env = {"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)}
    return (Way(fix=f"threads={n}", how=how, env=env, agent={"threads": n}),)


def _microbatches(params: Params) -> tuple[Way, ...]:
    n = params.get("microbatches")
    if not isinstance(n, int) or n < 2:
        return ()
    how = f"each torch.distributed.pipelining schedule built with n_microbatches={n} (the same batch, split finer)"
    return (Way(fix=f"n_microbatches={n}", how=how, agent={"pipeline_microbatches": n}),)


def _workers(params: Params) -> tuple[Way, ...]:
    n = params.get("num_workers")
    if not isinstance(n, int):
        return ()
    how = f"every DataLoader built with num_workers={n}, persistent_workers={n > 0}"
    return (
        Way(
            fix=f"num_workers={n}", how=how, agent={"loader": {"num_workers": n, "persistent_workers": n > 0}}
        ),
    )


def _allocator(params: Params) -> tuple[Way, ...]:
    """glibc's thresholds, then jemalloc and tcmalloc in place of glibc's malloc, each where installed."""
    from pinchpoint.pipeline import preload

    ways = [
        Way(
            fix="glibc thresholds",
            how=f"environment: {GLIBC_FIX}, and set again (mallopt) after the first step",
            env=GLIBC_ENV,
            agent={
                "malloc": {"mmap_threshold": GLIBC_MMAP_THRESHOLD, "trim_threshold": GLIBC_TRIM_THRESHOLD}
            },
        )
    ]
    for name in preload.PRELOADS:
        lib = preload.find(name)
        agent = ways[0].agent  # (inert under another allocator: the agent finds no glibc to set)
        if lib is None:
            why = f"{name} is not installed here ({preload.INSTALL[name]})"
            ways.append(Way(fix=f"{name} preload", how="-", agent=agent, cannot=why))
            continue
        how = f"LD_PRELOAD={lib}: the program's malloc and free are {name}'s"
        ways.append(
            Way(fix=f"{name} preload", how=how, env={"LD_PRELOAD": preload.ld_preload(lib)}, agent=agent)
        )
    return tuple(ways)


def _checkpoint_less(params: Params) -> tuple[Way, ...]:
    n = params.get("every")
    if not isinstance(n, int):
        return ()
    how = f"torch.save writes every {n}th call (the first included) in the trial run only"
    return (Way(fix=f"torch.save every {n} calls", how=how, agent={"checkpoint_every": n}),)


def _no_sync(params: Params) -> tuple[Way, ...]:
    n = params.get("micro_batches")
    if params.get("accumulating") != 1 or not isinstance(n, int) or n < 2:
        return ()
    how = (
        f"each DistributedDataParallel module's forward run under no_sync() for the first {n - 1} of "
        f"every {n} forwards between optimizer steps (the last all-reduces)"
    )
    return (Way(fix=f"no_sync over {n} micro-batches", how=how, agent={"no_sync": n}),)


FIXES: dict[FixKind, Fix] = {
    FixKind.THREADS: Fix(ways=_threads),
    FixKind.ALLOCATOR: Fix(ways=_allocator),
    FixKind.WORKERS: Fix(ways=_workers),
    FixKind.PERSISTENT_WORKERS: _by_agent(
        "persistent_workers=True",
        "every DataLoader with workers built with persistent_workers=True",
        loader={"persistent_workers": True},
    ),
    FixKind.LOAD_IN_PROCESS: _by_agent(
        "num_workers=0", "every DataLoader built with num_workers=0", loader={"num_workers": 0}
    ),
    FixKind.PIN_MEMORY: _by_agent(
        "pin_memory=True", "every DataLoader built with pin_memory=True", loader={"pin_memory": True}
    ),
    FixKind.COMPILE: _by_agent(
        "torch.compile(model)",
        "each top-level module with parameters run through torch.compile (default mode) by the agent, "
        "compiled in the warm-up steps",
        compile=True,
    ),
    FixKind.CHECKPOINT_LESS: Fix(ways=_checkpoint_less),
    FixKind.NO_SYNC: Fix(
        ways=_no_sync,
        cannot="accumulating gradients over micro-batches changes the loop's code: the snippet shows it",
    ),
    FixKind.BF16_AUTOCAST: _by_agent(
        "bf16 autocast",
        "each top-level module with parameters run under torch.autocast(its device, bfloat16), its outputs "
        "cast back to float32 for the loss (fp32 weights and optimizer)",
        autocast="bfloat16",
    ),
    FixKind.FP32: _by_agent(
        "autocast off", "every torch.autocast region entered with enabled=False", autocast="off"
    ),
    FixKind.FUSED_OPTIMIZER: _by_agent(
        "fused optimizer",
        "Adam, AdamW, SGD and Adagrad built with fused=True (foreach=True where fused refuses), unless the "
        "program chose",
        fused_optimizer=True,
    ),
    FixKind.TF32: _by_agent(
        "TF32", "torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 set at start-up", tf32=True
    ),
    FixKind.GC_LESS: Fix(
        ways=_always(
            Way(
                fix="gc.collect() made young",
                how="each gc.collect() the program calls collects the youngest generation only (gc.collect(0))",
                agent={"gc": {"collect": "young"}},
            ),
            Way(
                fix="gc.freeze() after start-up",
                how="gc.freeze() at the end of the first step: what start-up built (imports, model, data) is "
                "left out of every later collection",
                agent={"gc": {"freeze": True}},
            ),
        )
    ),
    FixKind.RESHARD: _by_agent(
        "reshard_after_forward=False",
        "each FSDP2 module's set_reshard_after_forward(False) once step 1 has run (the modules exist then)",
        fsdp_reshard=False,
    ),
    FixKind.LOG_LESS: Fix(),
    FixKind.VECTORISE: Fix(),
    FixKind.EVALUATE_LESS: Fix(),
    FixKind.CACHE_STARTUP: Fix(),
    FixKind.MICROBATCHES: Fix(ways=_microbatches),
    FixKind.DATA_PARALLEL: Fix(),
    FixKind.KV_CACHE: Fix(
        cannot="a KV cache is the model's code (or `use_cache=True` where the model has one): the snippet "
        "shows it"
    ),
    FixKind.BATCHING: Fix(
        cannot="batching is the server's code (a queue that gathers requests for one model call): the "
        "snippet shows it"
    ),
    FixKind.DYNAMIC_SHAPES: Fix(
        ways=_always(
            Way(
                fix="dynamic=None",
                how="torch.compile(..., dynamic=False) compiles with dynamic=None (the default: the second "
                "size compiles one graph dynamic in it); whole runs timed, their compilations included",
                agent={"dynamic": True},
                whole_run=True,
            )
        )
    ),
    FixKind.COMPILE_CACHE: Fix(
        cannot="a cache changes the next run's compilation, which try's steady steps leave out: run the "
        "program twice with the same TORCHINDUCTOR_CACHE_DIR and compare the runs' wall clocks"
    ),
    FixKind.GRAPH_BREAKS: Fix(
        ways=_capture_scalars,
        cannot="the line that breaks the graph is the program's code: the snippet shows it",
    ),
}
"""Every kind of fix a finding names, and how `try` applies it (or why it cannot)."""


def ways_of(kind: str | None, params: Params) -> tuple[tuple[Way, ...], str]:
    """The ways to apply a finding's fix, and why it cannot be applied when there are none."""
    try:
        fix = FIXES.get(FixKind(kind)) if kind else None
    except ValueError:
        fix = None
    if fix is None:
        return (), CODE
    return (fix.ways(params) if fix.ways is not None else ()), fix.cannot
