"""The loop around the steps: found from the running stack and the program's source, recorded in the
process info, and used to keep only the loop's own samples in the host stack scope."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pinchpoint.analysis.stacks import loop_samples, stack_summary
from pinchpoint.ingest.stacks import parse_folded
from pinchpoint.trace.run import LoopSite

PROGRAM = textwrap.dedent(
    """
    import functools, sys
    from pinchpoint.capture.loop_site import loop_site

    found = []

    def step():  # a helper with no loop around the call: its caller's loop is the one
        found.append(loop_site())

    def traced(fn):
        @functools.wraps(fn)
        def inner(*a):
            return fn(*a)
        return inner

    @traced
    def train(epochs):
        setup = [0, 1, 1]
        for epoch in range(epochs):
            def nested():
                for _ in range(1):
                    pass
            for batch in setup:
                if batch == 0:
                    step()
            print("eval", epoch)

    train(1)
    while len(found) < 2:
        step()
    found.append(loop_site())  # no loop around this call at all
    import json
    print(json.dumps(found))
    """
)


def test_loop_site_is_the_innermost_loop_of_the_programs_own_code(tmp_path: Path) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    in_train, at_module, outside = json.loads(res.stdout.splitlines()[-1])
    lines = PROGRAM.splitlines()
    # `for batch in setup:` .. `step()` inside `train`, decorated, past the helper and the decorator's frame
    assert in_train["function"] == "train" and in_train["file"] == str(script)
    assert lines[in_train["first_line"] - 1].strip() == "for batch in setup:"
    assert lines[in_train["last_line"] - 1].strip() == "step()"
    assert lines[in_train["call_line"] - 1].strip() == "step()"
    assert at_module["function"] == "<module>"
    assert lines[at_module["first_line"] - 1].strip() == "while len(found) < 2:"
    assert at_module["last_line"] == at_module["first_line"] + 1
    assert outside is None


def test_a_loop_inside_a_library_is_not_the_programs(tmp_path: Path) -> None:
    # the stdlib's own loop (map's caller is the program, whose line has no loop): nothing is claimed
    script = tmp_path / "prog.py"
    script.write_text(
        "import json\nfrom pinchpoint.capture.loop_site import loop_site\n"
        "print(json.dumps(list(map(lambda _: loop_site(), [0]))))\n"
    )
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [None]


def test_loop_site_holds_frames_by_file_function_and_line() -> None:
    loop = LoopSite(file="/w/train.py", function="main", qualname="main", first_line=40, last_line=58)
    assert loop.holds("/w/train.py", "main", 40) and loop.holds("/w/train.py", "main", 58)
    assert not loop.holds("/w/train.py", "main", 39) and not loop.holds("/w/train.py", "main", 59)
    assert not loop.holds("/w/train.py", "other", 45) and not loop.holds("/w/eval.py", "main", 45)
    assert not loop.holds("/w/train.py", "main", None)
    method = LoopSite(file="/w/t.py", function="fit", qualname="Trainer.fit", first_line=1, last_line=9)
    assert method.holds("/w/t.py", "Trainer.fit", 5) and method.holds("/w/t.py", "fit", 5)


SITE = "/venv/lib/python3.11/site-packages"
FOLDED = "\n".join(
    [
        # building the data before the loop: the program's own code, but not the loop's
        'process 1:"python train.py";<module> (/w/train.py:90);main (/w/train.py:30);make_data (/w/train.py:12) 200',
        # importing torch: no program frame below <module>
        f'process 1:"python train.py";<module> (/w/train.py:1);_find_and_load (<frozen importlib._bootstrap>:1);'
        f"<module> ({SITE}/torch/__init__.py:10) 100",
        # the loop's own Python: a metrics helper called from line 45 of main's loop
        'process 1:"python train.py";<module> (/w/train.py:90);main (/w/train.py:45);accuracy (/w/train.py:20) 30',
        # the loop's body itself
        'process 1:"python train.py";<module> (/w/train.py:90);main (/w/train.py:50) 10',
        # evaluation after the loop
        'process 1:"python train.py";<module> (/w/train.py:90);main (/w/train.py:70);evaluate (/w/train.py:22) 60',
    ]
)


def test_host_scope_keeps_only_samples_inside_the_loop() -> None:
    stacks, _ = parse_folded(FOLDED, rate_hz=20)
    loop = LoopSite(file="/w/train.py", function="main", qualname="main", first_line=40, last_line=58)
    host = stack_summary(stacks, [1], [], cwd="/w", loop=loop).host
    assert host is not None and host.samples == 40 and host.seconds == 2.0
    assert [h.label for h in host.top] == ["accuracy (train.py:20)", "main (train.py:50)"]
    assert host.top[0].share == 0.75
    assert host.within == "lines 40-58 of train.py"
    # without the loop (an older run directory, a loop inside a library) every main-thread sample counts
    everything = stack_summary(stacks, [1], [], cwd="/w").host
    assert everything is not None and everything.samples == 400 and everything.within is None
    assert everything.top[0].label.startswith("make_data (")


def test_loop_samples_keep_the_loops_and_the_other_processes() -> None:
    worker = 'process 1:"python train.py";process 2:"python train.py";_worker_loop (/w/train.py:5) 7'
    stacks, _ = parse_folded(FOLDED + "\n" + worker, rate_hz=20)
    loop = LoopSite(file="/w/train.py", function="main", qualname="main", first_line=40, last_line=58)
    kept = loop_samples(stacks, {1: loop})
    assert sum(s.count for s in kept.samples if s.pid == 1) == 40  # accuracy (30) + the loop body (10)
    assert sum(s.count for s in kept.samples if s.pid == 2) == 7  # a DataLoader worker, as it is
    assert kept.rate_hz == 20
