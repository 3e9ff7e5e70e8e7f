"""input.fetch and input.preprocess (the DataLoader's wait, told apart by what the loaders did) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct

WHOLE_BATCHES = (
    "Fetch a whole batch with one indexing call rather than one __getitem__ per sample and a collate (a "
    "TensorDataset indexes with a list of indices), or slice pre-shuffled tensors."
)


def _activity(
    per_batch_ns: float,
    in_process: bool,
    processes: int,
    cpu_frac: float,
    runq_frac: float,
    sleep_frac: float,
) -> str:
    where = "the training process itself (num_workers=0)" if in_process else f"{processes} worker process(es)"
    return (
        f"Loading a batch takes {ms(per_batch_ns)} in {where}: {pct(cpu_frac)} on a CPU, "
        f"{pct(runq_frac)} waiting for a CPU, {pct(sleep_frac)} asleep (I/O, latency)"
    )


def _transfer(
    batch_bytes: int, worker_ns: float, receive_ns: float, fetch_ns: float, in_workers: bool
) -> str:
    return (
        f"A DataLoader worker {'passes' if in_workers else 'would pass'} each batch ({batch_bytes / 1e3:.0f} kB) "
        f"through shared memory: {ms(worker_ns)} of the worker's time and {ms(receive_ns)} of the training "
        f"process's per batch (measured here with one worker), against {ms(fetch_ns)} to fetch it"
        + ("" if in_workers else " in the training process")
    )


def _settings(
    num_workers: int,
    batch_size: int | None,
    pin_memory: bool,
    persistent_workers: bool,
    prefetch_factor: int | None,
    site: str | None = None,
) -> str:
    return (
        f"DataLoader settings in use: num_workers={num_workers}, batch_size={batch_size}, "
        f"pin_memory={pin_memory}, persistent_workers={persistent_workers}, "
        f"prefetch_factor={prefetch_factor}"
        + (f" (the loader built at {site}, which feeds the steps)" if site else "")
    )


def _prep_cpu(prep_batch_ns: float, batches_per_step: float, other_cpu_ns: float, cores: int) -> str:
    return (
        f"Preprocessing needs {ms(prep_batch_ns)} of CPU per batch"
        + (f" ({batches_per_step:.0f} batches a step)" if batches_per_step >= 1.5 else "")
        + f"; the rest of the step uses {ms(other_cpu_ns)} of CPU; the machine has {cores} usable core(s)"
    )


def _options(workers_x: float, workers: int, threads: int | None, cores: int, cheaper_x: float) -> str:
    how = (
        f"with num_workers={workers} and torch.set_num_threads({threads}): the compute keeps the "
        f"{cores} cores busy, so a worker takes one of them"
        if threads
        else f"workers share the {cores} cores with compute"
    )
    return f"More workers: predicted ×{workers_x:.2f} ({how}); cheaper or cached preprocessing: up to ×{cheaper_x:.2f}"


def _workers_trial(
    workers: int,
    steps: int,
    trial_ns: int,
    steady_ns: int,
    speedup: float,
    p: float,
    pays: bool,
    complete: bool,
) -> str:
    verdict = (
        "they pay"
        if pays
        else "the epoch ended during the trial: not a full measurement"
        if not complete
        else "no gain beyond the steps' own spread"
        if speedup >= 1
        else "slower"
    )
    return (
        f"Measured: {steps} steps whose batches pinchpoint loaded with num_workers={workers} (the program's "
        f"own batches, in order) took {ms(trial_ns)} (median) against {ms(steady_ns)} (the steady steps around it): ×{speedup:.2f}, "
        f"{verdict} (rank test p = {p:.3f})"
    )


def _fix_workers(workers: int, threads: int | None, cores: int) -> str:
    pool = f" with torch.set_num_threads({threads}) to leave it a core" if threads else ""
    return (
        f"Move preprocessing off the critical path: num_workers={workers}{pool} "
        f"(fits {cores} cores), or make it cheaper (cache decoded samples, vectorise augmentation)."
    )


def _fix_whole_batches(transfer_bound: bool, workers: int, workers_x: float) -> str:
    if transfer_bound:
        return (
            "Load in the training process (num_workers=0): moving each batch out of a worker costs "
            "more than fetching it. " + WHOLE_BATCHES
        )
    return (
        f"Keep num_workers={workers}: a worker would spend more per batch moving it between processes "
        f"than the fetch costs (more workers: ×{workers_x:.2f}). Make each fetch cheaper instead: "
        + WHOLE_BATCHES
    )


PHRASES: dict[str, Callable[..., str]] = {
    "input.loader.wait": lambda share, wait_ns, step_ns: (
        f"DataLoader wait is {pct(share)} of the step ({ms(wait_ns)} of {ms(step_ns)})"
    ),
    "input.loader.activity": _activity,
    "input.loader.unrecorded": lambda: "The loader's own activity was not recorded (not a torch DataLoader?)",
    "input.loader.transfer": _transfer,
    "input.loader.stacks_where": lambda in_process: (
        "in the training process's dataset fetches" if in_process else "in the loaders"
    ),
    "input.loader.settings": _settings,
    "input.fetch.fix": lambda workers, cores: (
        f"Overlap loading with compute: num_workers={workers} (sleeping workers cost little CPU, "
        f"even on {cores} cores), persistent_workers=True; or cache the data locally."
    ),
    "input.fetch.snippet": lambda workers: (
        f"DataLoader(dataset, batch_size=..., num_workers={workers}, persistent_workers=True, prefetch_factor=4)"
    ),
    "input.preprocess.cpu": _prep_cpu,
    "input.preprocess.options": _options,
    "input.preprocess.transfer_bound": lambda receive_ns, batches_per_step, receive_frac, fetch_ns: (
        f"The training process spends ≈ {ms(receive_ns)} a step receiving {batches_per_step:.0f} batch(es) from "
        f"the workers ({pct(receive_frac)} of the wait), while fetching one takes a worker "
        f"{ms(fetch_ns)}: the wait is the transfer, not the preprocessing"
    ),
    "input.preprocess.whole_batches": lambda fetch_ns, wait_ns, speedup: (
        f"Fetched as whole batches (one indexing call per tensor: {ms(fetch_ns)} a batch, "
        f"measured), the wait would be ≈ {ms(wait_ns)} a step: predicted ×{speedup:.2f}"
    ),
    "input.preprocess.fix_workers": _fix_workers,
    "input.workers.trial": _workers_trial,
    "input.preprocess.snippet_workers": lambda workers, threads: (
        (f"torch.set_num_threads({threads})\n" if threads else "")
        + f"DataLoader(dataset, num_workers={workers}, persistent_workers=True)"
    ),
    "input.preprocess.fix_cheaper": lambda cores: (
        f"Make preprocessing cheaper: the {cores} core(s) are already busy, so more workers would compete "
        "with compute. Cache or precompute the transformed samples, vectorise augmentation over the "
        "batch, or move it to the accelerator."
    ),
    "input.preprocess.snippet_cache": lambda: (
        "cache = [transform(x) for x in raw]  # once, before training\n"
        "dataset = TensorDataset(torch.stack(cache), labels)"
    ),
    "input.restart.steps": lambda iterators, workers, site: (
        f"The training DataLoader{f' built at {site}' if site else ''} made {iterators} iterators (one an "
        f"epoch) with {workers} worker(s) each, without persistent_workers: every epoch started new workers"
    ),
    "input.restart.first": lambda first_ns, other_ns, saved_ns, steps, share: (
        f"Each epoch's first step took {ms(first_ns)} (median) against {ms(other_ns)} for the others: "
        f"{saved_ns / 1e9:.2f} s over the run's {steps} steps, {pct(share)} of their time, spent starting "
        "workers and on what each opens before its first batch"
    ),
    "input.restart.fix": lambda workers: (
        "Keep the workers for the whole run: DataLoader(..., persistent_workers=True). They start once, "
        "and what the dataset opens in each (files, connections, indexes) stays open. Priced as the "
        "epochs' first steps costing what the others do (the first epoch's start stays)."
    ),
    "input.restart.snippet": lambda workers: (
        f"DataLoader(dataset, batch_size=..., num_workers={workers}, persistent_workers=True)"
    ),
    "input.preprocess.fix_whole_batches": _fix_whole_batches,
    "input.preprocess.snippet_whole_batches": lambda: (
        "batches = BatchSampler(RandomSampler(dataset), batch_size=32, drop_last=False)\n"
        "DataLoader(dataset, sampler=batches, batch_size=None)  # dataset[[i, j, ...]]: one batch"
    ),
}
