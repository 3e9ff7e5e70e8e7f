"""analysis/outside.py: the main thread's phases from py-spy's samples, as `attach --outside` reads
them (the real process runs in tests/test_attach.py)."""

from __future__ import annotations

from pathlib import Path

from pinchpoint.analysis.outside import main_thread, phase_of, threads
from pinchpoint.ingest.stacks import read_folded
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
