"""analysis/outside.py: the main thread's phases from py-spy's samples, as `attach --outside` reads
them (the real process runs in tests/test_attach.py)."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from conftest import make_cpu, make_env
from pinchpoint.analysis.outside import MainThread, OutsideWatch, Threads, main_thread, phase_of, threads
from pinchpoint.diagnosis.engine import diagnose_outside
from pinchpoint.diagnosis.finding import Basis, Confidence
from pinchpoint.ingest.stacks import read_folded
from pinchpoint.report.outside_doc import OutsideDoc, WatchedAttach, build_outside, outside_schema
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import Run, RunMeta
from pinchpoint.trace.stacks import Frame

SITE = "/venv/lib/python3.11/site-packages/torch"
MAIN = Frame("<module>", "/w/train.py", 80)
LOOP = Frame("main", "/w/train.py", 60)
STEP = Frame("Optimizer.profile_hook_step.<locals>.wrapper", f"{SITE}/optim/optimizer.py", 530)
CLOSURE = Frame("closure", "/w/train.py", 50)
BACKWARD = Frame("Tensor.backward", f"{SITE}/_tensor.py", 623)
CALL = Frame("Module._call_impl", f"{SITE}/nn/modules/module.py", 1789)
NEXT = Frame("_BaseDataLoaderIter.__next__", f"{SITE}/utils/data/dataloader.py", 725)
GETITEM = Frame("Shards.__getitem__", "/w/train.py", 30)


def test_the_deepest_phase_wins() -> None:
    assert phase_of((MAIN, LOOP, STEP, CLOSURE, BACKWARD)) == "backward"  # LBFGS / Lightning closures
    assert phase_of((MAIN, LOOP, STEP, CLOSURE, CALL)) == "forward"
    assert phase_of((MAIN, LOOP, STEP)) == "optimizer"
    assert phase_of((MAIN, LOOP, NEXT, GETITEM)) == "data_wait"  # the dataset's own code is loading
    assert phase_of((MAIN, LOOP)) == "loop"
    assert phase_of((Frame("_bootstrap", "/usr/lib/python3.11/threading.py", 1002),)) == "other"


def test_the_main_thread_is_the_one_whose_id_is_the_pid(tmp_path: Path) -> None:
    folded = tmp_path / "stacks.folded"
    folded.write_text(
        'process 7:"python train.py";thread (7): MainThread;<module> (/w/train.py:80);main (/w/train.py:60) 30\n'
        f'process 7:"python train.py";thread (7): MainThread;<module> (/w/train.py:80);main (/w/train.py:60);'
        f"_BaseDataLoaderIter.__next__ ({SITE}/utils/data/dataloader.py:725) 10\n"
        'process 7:"python train.py";thread (9): Thread-1;<module> (/w/train.py:80) 500\n'
        'process 8:"python train.py";thread (8): MainThread;<module> (/w/worker.py:1) 500\n'
    )
    stacks, bad = read_folded(folded)
    assert bad == 0
    main = main_thread(stacks, 7, "/w")
    assert main is not None and main.samples == 40
    assert main.shares["loop"] == 0.75 and main.shares["data_wait"] == 0.25
    assert main.hot["loop"] == [("main (train.py:60)", 0.75)]


def test_threads_count_the_busy_ones() -> None:
    t = threads({"7": 9.0, "9": 0.4, "10": 0.6, "11": 0.0}, 7, 10.0)
    assert t is not None and t.main_cores == 0.9 and t.busy == 2 and t.total == 4
    assert threads({}, 7, 10.0) is None


# ------------------------------------------------------------------- the rules over a watch from outside

PHASES0 = {
    "data_wait": 0.0,
    "forward": 0.0,
    "backward": 0.0,
    "optimizer": 0.0,
    "checkpoint": 0.0,
    "loop": 0.0,
}


def _watch(
    shares: dict[str, float] | None = None,
    *,
    main_cores: float | None = 0.9,
    workers: dict[int, float] | None = None,
    busy: int = 1,
    process_cores: float = 1.0,
    rss: tuple[int, ...] = (),
) -> OutsideWatch:
    phases = {**PHASES0, **(shares or {})}
    phases["other"] = max(0.0, 1.0 - sum(phases.values()))
    usage = make_cpu(cores=2, process_cores=process_cores)
    return OutsideWatch(
        main=MainThread(samples=200, shares=phases, hot={"loop": [("main (train.py:60)", 0.4)]}),
        threads=Threads(wall_s=10.0, main_cores=main_cores, busy=busy, total=busy + 2),
        usage=usage,
        workers=workers or {},
        usable_cores=2,
        rss_bytes=rss,
        watched_ns=10 * 10**9,
    )


OUTSIDE_CASES: list[tuple[str, OutsideWatch, str | None]] = [
    # (case, watch, the one finding's id or None)
    (
        "loader waits, no workers, main thread mostly idle",
        _watch({"data_wait": 0.4}, main_cores=0.65),
        "input.fetch",
    ),
    ("loader computes in the process", _watch({"data_wait": 0.4}, main_cores=0.95), "input.preprocess"),
    ("busy workers compute", _watch({"data_wait": 0.4}, workers={11: 0.8}), "input.preprocess"),
    ("idle workers wait", _watch({"data_wait": 0.4}, workers={11: 0.2}), "input.fetch"),
    ("loader under the floor", _watch({"data_wait": 0.05}), None),
    ("the loop's own Python on a CPU", _watch({"loop": 0.5}, main_cores=0.9), "host.python"),
    ("the loop waits (a sleep): a note, no finding", _watch({"loop": 0.5}, main_cores=0.1), None),
    ("checkpoints", _watch({"checkpoint": 0.06, "forward": 0.9}), "io.checkpoint"),
    ("threads beyond the cores, cores kept busy", _watch(busy=5, process_cores=1.9), "cpu.oversubscription"),
    ("threads beyond the cores, cores idle", _watch(busy=5, process_cores=0.5), None),
    ("memory grows", _watch(rss=(1 << 30, 1200 << 20, 1300 << 20, 1400 << 20)), "memory.leak"),
    ("memory steady", _watch(rss=(1 << 30,) * 4), None),
]


@pytest.mark.parametrize(("case", "watch", "expected"), OUTSIDE_CASES, ids=[c[0] for c in OUTSIDE_CASES])
def test_outside_rules_table(case: str, watch: OutsideWatch, expected: str | None) -> None:
    diagnosis = diagnose_outside(watch)
    assert [f.id.value for f in diagnosis.findings] == ([expected] if expected else []), case
    for f in diagnosis.findings:
        assert f.confidence is Confidence.LOW and f.estimated_speedup == 1.0 and f.basis is Basis.NONE
        assert say(f.fix) and all(say(e) for e in f.evidence)
    waits = [n for n in diagnosis.notes if n.fact.key == "outside.loop_waits"]
    assert bool(waits) == (case == "the loop waits (a sleep): a note, no finding")


def test_the_outside_document_validates_and_keeps_its_words(tmp_path: Path) -> None:
    watch = _watch({"data_wait": 0.4}, main_cores=0.65, busy=5, process_cores=1.9)
    run = Run(
        meta=RunMeta(command=("python", "train.py"), started_at="2026-12-06T12:00:00"), environment=make_env()
    )
    doc = build_outside(run, WatchedAttach(pid=7, duration_s=10.0, ended="detached"), "gdb is not installed", watch,
                        diagnose_outside(watch))  # fmt: skip
    data = doc.to_dict()
    jsonschema.Draft202012Validator(outside_schema()).validate(data)
    assert OutsideDoc.from_dict(data) == doc
    fetch, threads_ = data["findings"]  # by share: the unmeasured share (null) last
    assert fetch["evidence"][0] == "The main thread spends 40% of its time in the DataLoader (200 samples)"
    assert fetch["fix"].startswith("DataLoader(num_workers=2") and fetch["share"] == 0.4
    assert threads_["id"] == "cpu.oversubscription" and threads_["share"] is None
    assert any("compute.math" in item["what"] for item in data["not_judged"])
