"""The DataLoader workers trial: steps that wait for a loader fetching in the training process get a
few steps of their own batches loaded by workers, and the input findings are priced from them
(`capture/worker_trial.py`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import make_env, make_process, make_rank_analysis, make_run_analysis, make_steps
from pinchpoint.analysis.loader import LoaderActivity, WorkerTrialResult, worker_trial
from pinchpoint.analysis.steps import step_stats
from pinchpoint.capture.worker_trial import STEPS, WARM, WorkerTrialRunner, workers_for
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Basis, Finding, facts
from pinchpoint.ingest.trials import worker_trial as read_worker_trial
from pinchpoint.trace.run import LoaderConfig, RankData
from pinchpoint.trace.trials import WorkerTrial

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset, IterableDataset  # noqa: E402
from torch.utils.data.dataloader import _BaseDataLoaderIter  # noqa: E402

ORIG_NEXT = _BaseDataLoaderIter.__next__


class Numbers(Dataset[Any]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> Any:
        return torch.tensor([i, i * i]), i % 2


def _loader(seed: int = 7) -> DataLoader[Any]:
    return DataLoader(Numbers(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(seed))


def _waiting(runner: WorkerTrialRunner, steps: int = 6) -> None:
    for i in range(steps):  # 100 ms steps, 50 ms of it waiting for one batch
        runner.observe(i, 100_000_000, 50_000_000, 1, own_settings=True)
    runner.note_fetch(50_000_000, 49_000_000)


def test_the_trial_serves_the_programs_own_batches_in_order_from_workers(tmp_path: Path) -> None:
    expected = [x.tolist() for x, _ in _loader()]
    torch.manual_seed(0)
    after_expected = torch.rand(3)

    torch.manual_seed(0)
    it = iter(_loader())
    runner = WorkerTrialRunner(tmp_path)
    got = [runner.next_batch(it, ORIG_NEXT)[0].tolist()]
    _waiting(runner)
    assert runner.on_step_end(torch, 7, ready=False) is False
    assert runner.on_step_end(torch, 7, ready=True) is True
    assert runner.trial_it is not None and runner.workers == 2  # wait = compute: two workers
    steps = [True]
    for step in range(8, 9 + WARM + STEPS):
        got.append(runner.next_batch(it, ORIG_NEXT)[0].tolist())
        steps.append(runner.on_step_end(torch, step, ready=True))
    got.extend(x.tolist() for x in iter(lambda: _next_or_none(runner, it), None))
    assert got == expected  # the same batches, in the same order, with the trial in the middle
    assert steps == [True] * (WARM + STEPS + 1) + [False]
    assert runner.trial_it is None  # its workers are gone
    assert torch.equal(
        torch.rand(3), after_expected
    )  # the workers' seed came from the program's stream: put back
    record = read_worker_trial(__import__("json").loads((tmp_path / "worker_trial.json").read_text()))
    assert record == WorkerTrial(workers=2, steps=tuple(range(7 + WARM, 7 + WARM + STEPS)), complete=True)


def _next_or_none(runner: WorkerTrialRunner, it: Any) -> Any:
    try:
        return runner.next_batch(it, ORIG_NEXT)[0]
    except StopIteration:
        return None


def test_an_epoch_that_ends_in_the_trial_ends_as_it_would(tmp_path: Path) -> None:
    it = iter(_loader())
    runner = WorkerTrialRunner(tmp_path)
    for _ in range(12):  # 4 of 16 batches left: fewer than the trial wants
        runner.next_batch(it, ORIG_NEXT)
    _waiting(runner)
    assert runner.on_step_end(torch, 13, ready=True) is True
    rest = [b for b in iter(lambda: _next_or_none(runner, it), None)]
    assert len(rest) == 4 and not runner.complete


def test_batches_taken_for_a_trial_that_cannot_start_go_back_to_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = [x.tolist() for x, _ in _loader()]
    it = iter(_loader())
    runner = WorkerTrialRunner(tmp_path)
    got = [runner.next_batch(it, ORIG_NEXT)[0].tolist()]
    _waiting(runner)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no fork here")

    monkeypatch.setattr(runner, "_workers_iter", broken)
    assert runner.on_step_end(torch, 7, ready=True) is False
    got.extend(x.tolist() for x in iter(lambda: _next_or_none(runner, it), None))
    assert got == expected and not (tmp_path / "worker_trial.json").exists()


class Fragile(Numbers):
    """Cannot be loaded in a worker process (a handle that does not survive fork)."""

    def __init__(self) -> None:
        import os

        self.pid = os.getpid()

    def __getitem__(self, i: int) -> Any:
        import os

        if os.getpid() != self.pid:
            raise OSError("handle opened in another process")
        return super().__getitem__(i)


def test_a_trial_whose_workers_fail_hands_the_batches_back_and_the_program_runs_on(tmp_path: Path) -> None:
    def loader() -> DataLoader[Any]:
        return DataLoader(Fragile(), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))

    expected = [x.tolist() for x, _ in loader()]
    it = iter(loader())
    runner = WorkerTrialRunner(tmp_path)
    got = [runner.next_batch(it, ORIG_NEXT)[0].tolist()]
    _waiting(runner)
    assert runner.on_step_end(torch, 7, ready=True) is True
    for step in range(8, 9 + WARM + STEPS):
        got.append(runner.next_batch(it, ORIG_NEXT)[0].tolist())
        runner.on_step_end(torch, step, ready=True)
    got.extend(x.tolist() for x in iter(lambda: _next_or_none(runner, it), None))
    assert got == expected and runner.failed
    assert not (tmp_path / "worker_trial.json").exists()  # nothing measured


def test_no_trial_for_workers_already_there_short_waits_or_iterable_datasets(tmp_path: Path) -> None:
    with_workers = iter(DataLoader(Numbers(), batch_size=4, num_workers=1))
    runner = WorkerTrialRunner(tmp_path)
    runner.next_batch(with_workers, ORIG_NEXT)
    _waiting(runner)
    assert runner.on_step_end(torch, 7, ready=True) is False
    with_workers._shutdown_workers()  # type: ignore[attr-defined]

    runner = WorkerTrialRunner(tmp_path)
    runner.next_batch(iter(_loader()), ORIG_NEXT)
    for i in range(6):
        runner.observe(i, 100_000_000, 5_000_000, 1, own_settings=True)  # 5% waiting
    assert runner.on_step_end(torch, 7, ready=True) is False

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(100))

    runner = WorkerTrialRunner(tmp_path)
    runner.next_batch(iter(DataLoader(Stream(), batch_size=4)), ORIG_NEXT)
    _waiting(runner)
    assert runner.on_step_end(torch, 7, ready=True) is False
    assert not (tmp_path / "worker_trial.json").exists()


@pytest.mark.parametrize(
    ("wait", "step", "cpu", "cores", "expected"),
    [(50, 100, 1.0, 2, 2), (90, 100, 1.0, 2, 2), (90, 100, 1.0, 16, 8), (90, 100, 0.05, 2, 8),
     (75, 100, 0.05, 2, 4), (10, 100, 1.0, 2, 2), (50, 100, 1.0, 1, 1)],
)  # fmt: skip
def test_the_workers_tried(wait: int, step: int, cpu: float, cores: int, expected: int) -> None:
    assert workers_for(wait, step, cpu, cores) == expected


def _rank(trial_ms: float, *, sleeping: bool) -> Any:
    """30 steps of 100 ms, 50 of them waiting for one batch fetched in the process; the trial's steps
    (14-20) at `trial_ms`."""
    steps = list(make_steps(30, {"data_wait": 50, "forward": 20, "backward": 20}, 10))
    for i in range(14, 21):
        steps[i] = replace(steps[i], trial=True, end_ns=steps[i].start_ns + int(trial_ms * 1e6))
    data = RankData(
        rank=0, steps=tuple(steps), worker_trial=WorkerTrial(workers=2, steps=(16, 17, 18, 19, 20))
    )
    stats = step_stats(data)
    assert stats is not None
    result = worker_trial(data, stats.host_median_ns)
    assert isinstance(result, WorkerTrialResult)
    loader = LoaderActivity(
        config=LoaderConfig(
            t_ns=0,
            num_workers=0,
            pin_memory=False,
            prefetch_factor=None,
            persistent_workers=False,
            batch_size=32,
            dataset="Numbers",
        ),
        batches=30,
        wall_ns=30 * 50_000_000,
        cpu_ns=30 * (1_000_000 if sleeping else 49_000_000),
        runq_ns=0,
        in_main_process=True,
        processes=1,
    )
    return replace(
        make_rank_analysis({"data_wait": 50, "forward": 20, "backward": 20}, 10, main=make_process()),
        loader=loader,
        worker_trial=result,
    )


def _input(rank: Any) -> Finding:
    found = diagnose(make_run_analysis(make_env(cores=2), [rank])).findings
    (f,) = [f for f in found if f.id.startswith("input.")]
    return f


def test_workers_that_paid_in_the_trial_are_the_fix_at_the_measured_gain() -> None:
    for sleeping in (False, True):
        f = _input(_rank(55.0, sleeping=sleeping))
        assert f.id == ("input.fetch" if sleeping else "input.preprocess")
        assert f.basis is Basis.TRIAL and f.estimated_speedup == pytest.approx(100 / 55)
        assert dict(f.fix_params)["num_workers"] == 2
        assert facts(f)["input.workers.trial"]["pays"] is True


def test_workers_that_did_not_pay_are_not_advised() -> None:
    f = _input(_rank(110.0, sleeping=False))
    assert f.fix_kind is None or f.fix_kind.value != "workers"
    assert facts(f)["input.workers.trial"]["pays"] is False
    f = _input(_rank(110.0, sleeping=True))
    assert f.basis is Basis.TRIAL and f.estimated_speedup == 1.0 and f.confidence.value == "low"


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"workers": 0, "steps": [1]}, {"workers": 2, "steps": []}, {"workers": "2", "steps": [1]}],
)
def test_a_broken_trial_file_is_no_trial(obj: object) -> None:
    assert read_worker_trial(obj) is None
