"""The cost models rules price fixes with, as tables of measured inputs and the step they predict."""

from __future__ import annotations

import pytest

from pinchpoint.diagnosis.costs import (
    LoaderLoad,
    WorkerPlan,
    batched_requests,
    graph_break_saving,
    more_workers,
)

MS = 1_000_000


def load(**kw: float) -> LoaderLoad:
    base = dict(step_ns=100 * MS, wait_ns=50 * MS, prep_cpu_ns=50 * MS, send_ns=0.0, receive_ns=0.0)
    base.update(other_cpu_ns=50 * MS, cores=4, workers=0)
    base.update(kw)
    return LoaderLoad(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [
        # Free cores: one worker takes the 50 ms of loading off the 50 ms of compute.
        ("one-worker-overlaps", load(), WorkerPlan(step_ns=50 * MS, workers=1, threads=None)),
        # Three times the compute in loading: three workers, each as busy as the compute.
        ("heavy-loading", load(prep_cpu_ns=150 * MS), WorkerPlan(step_ns=50 * MS, workers=3, threads=None)),
        # Receiving each batch from a worker stays on the training process's path.
        (
            "receive-on-main-path",
            load(receive_ns=20 * MS),
            WorkerPlan(step_ns=70 * MS, workers=1, threads=None),
        ),
        # Sending batches is loading work: 4 cores' worth of CPU bounds the step.
        (
            "cores-bound",
            load(prep_cpu_ns=150 * MS, send_ns=50 * MS, other_cpu_ns=100 * MS),
            WorkerPlan(step_ns=75 * MS, workers=4, threads=None),
        ),
        # Compute already fills both cores: the worker's core comes out of the intra-op pool, and the
        # step gets slower (120 ms of compute CPU on one core), as measured on input_preprocess.py.
        (
            "saturated-two-cores",
            load(step_ns=100 * MS, wait_ns=40 * MS, prep_cpu_ns=40 * MS, other_cpu_ns=120 * MS, cores=2),
            WorkerPlan(step_ns=120 * MS, workers=1, threads=1),
        ),
        # Saturated on 1 core: no worker can have a core of its own; the step stays as it is.
        (
            "saturated-one-core",
            load(other_cpu_ns=60 * MS, cores=1),
            WorkerPlan(step_ns=100 * MS, workers=1, threads=0),
        ),
        # Two workers already: the plan starts from three.
        ("from-current", load(workers=2, cores=8), WorkerPlan(step_ns=50 * MS, workers=3, threads=None)),
    ],
)
def test_more_workers(name: str, given: LoaderLoad, expected: WorkerPlan) -> None:
    got = more_workers(given)
    assert got.workers == expected.workers and got.threads == expected.threads, name
    assert got.step_ns == pytest.approx(expected.step_ns), name


@pytest.mark.parametrize(
    ("overhead", "vector", "batch", "expected"),
    [
        (0.0, 0.0, 32, 1.0),  # nothing shared: a batch costs as much per request
        (0.5, 0.0, 32, 1 / (0.5 + 0.5 / 32)),  # half the call is per-op overhead
        (0.5, 0.3, 32, 1 / (0.2 + 0.8 / 32)),  # matrix-vector products are shared too
        (1.0, 0.0, 8, 8.0),  # all overhead: the batch's requests ride for free
    ],
)
def test_batched_requests(overhead: float, vector: float, batch: int, expected: float) -> None:
    assert batched_requests(overhead, vector, batch) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("around_ns", "calls", "whole", "saved"),
    [
        (400.0, 4.0, 2, 200.0),  # a break: 4 graph calls a step where one forward and one backward do
        (2.8e6, 34.0, 2, 2.8e6 * 32 / 34),  # a break in every block
        (400.0, 2.0, 2, 0.0),  # already whole
        (400.0, 1.0, 2, 0.0),  # fewer calls than whole frames (a graph that ran only forward)
    ],
)
def test_a_graph_break_saves_the_time_around_the_calls_it_adds(
    around_ns: float, calls: float, whole: int, saved: float
) -> None:
    assert graph_break_saving(around_ns, calls, whole) == pytest.approx(saved)
