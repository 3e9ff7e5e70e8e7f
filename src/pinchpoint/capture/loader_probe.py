"""What a DataLoader worker would cost this program per batch: one real worker passes a batch shaped
like the program's own through torch's shared-memory transfer, once, after the op window.

A program that loads in its training process (num_workers=0) is told to add workers when its steps wait
for data; whether that pays depends on what moving a batch between processes costs here (the worker
copies it into a new shared-memory segment, pickles it onto a pipe; the training process maps it back),
against what fetching it costs. On the reference machine that is ~1 ms a batch whatever its size below
~1 MB, so a cheap in-memory fetch (0.1-0.2 ms) gets slower with workers, not faster.

Measured, not modelled: a `DataLoader(num_workers=1, batch_size=None)` over a dataset that returns one
prebuilt batch of the program's shapes and dtypes. `worker_ns` is the time per batch when the training
process only pulls batches (the worker's pace: fetch, copy, send); `receive_ns` the time `next()` takes
when the batch is already waiting (what the training process itself pays per batch). And, for the
other way out, `batched_ns`: one indexing call per tensor with a list of batch-size indices, which is
what a dataset indexed by a whole batch (`BatchSampler` as the sampler) costs instead of a per-sample
`__getitem__` and a collate.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

ACTIVE = False
"""True while the probe's worker is forked: its copy of the agent records nothing (`Agent._after_fork`)."""
BATCHES = 24
MAX_BATCH_BYTES = 256 << 20
"""A bigger batch is not copied for the probe (the copy alone would take a noticeable while)."""
MAX_TENSORS = 16


def batch_spec(batch: Any) -> list[tuple[list[int], str]]:
    """Shapes and dtypes (torch's names) of the tensors in a collated batch: tuples, lists and dicts."""
    out: list[tuple[list[int], str]] = []
    stack = [batch]
    while stack and len(out) < MAX_TENSORS:
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(reversed(list(x.values())))
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
        elif hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "element_size"):
            out.append(([int(d) for d in x.shape], str(x.dtype).replace("torch.", "")))
    return out


def probe_worker_transfer(torch: Any, spec: list[tuple[list[int], str]]) -> dict[str, Any] | None:
    """Per-batch cost of a worker process for a batch of `spec`, or None when it can't be measured."""
    global ACTIVE
    if not spec:
        return None
    tensors = tuple(torch.zeros(shape, dtype=getattr(torch, dtype)) for shape, dtype in spec)
    nbytes = sum(int(t.numel()) * int(t.element_size()) for t in tensors)
    if nbytes > MAX_BATCH_BYTES:
        return None

    class _OneBatch(torch.utils.data.Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return 1 << 30

        def __getitem__(self, i: int) -> Any:
            return tensors

    batched_ns = _batched_fetch_ns(tensors)
    ACTIVE = True
    it: Any = None
    rng = torch.random.get_rng_state()  # an iterator draws its workers' base seed: the program's stream
    try:
        loader = torch.utils.data.DataLoader(_OneBatch(), batch_size=None, num_workers=1, prefetch_factor=2)
        it = iter(loader)
        next(it)  # the fork, and the first batch
        next(it)
        t0 = time.perf_counter_ns()
        for _ in range(BATCHES):
            next(it)
        worker_ns = (time.perf_counter_ns() - t0) // BATCHES
        receive = []
        for _ in range(5):
            time.sleep(3 * worker_ns / 1e9 + 0.002)  # the worker refills its two prefetched batches
            t0 = time.perf_counter_ns()
            next(it)
            receive.append(time.perf_counter_ns() - t0)
        receive.sort()
    finally:
        if it is not None:
            with contextlib.suppress(Exception):
                it._shutdown_workers()
        torch.random.set_rng_state(rng)
        ACTIVE = False
    return {
        "batch_bytes": nbytes,
        "tensors": len(tensors),
        "worker_ns": int(worker_ns),
        "receive_ns": int(receive[len(receive) // 2]),
        "batches": BATCHES,
        "batched_ns": batched_ns,
    }


def _batched_fetch_ns(tensors: tuple[Any, ...]) -> int | None:
    """Median time to index every tensor of the batch with a Python list of its batch-size rows."""
    rows = [int(t.shape[0]) for t in tensors if t.dim() > 0]
    if not rows:
        return None
    index = list(range(min(rows)))[::-1]
    samples = []
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range(10):
            for t in tensors:
                if t.dim() > 0:
                    t[index]
        samples.append((time.perf_counter_ns() - t0) // 10)
    samples.sort()
    return int(samples[len(samples) // 2])
