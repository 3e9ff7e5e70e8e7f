"""Stack samples: folded-stack reading, where samples land, and the flame graph / speedscope views."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pinchpoint.analysis.stacks import is_library, stack_summary
from pinchpoint.diagnosis.rules.base import stack_evidence
from pinchpoint.ingest.stacks import parse_folded
from pinchpoint.report.flamegraph import flamegraph_svg, speedscope_json
from pinchpoint.report.phrases import say
from pinchpoint.trace.stacks import Frame

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
MAIN = 100
WORKER = 200
FOLDED = "\n".join(
    [
        # the training loop: a metrics loop in the program's own code (host Python)
        f'process {MAIN}:"python train.py";<module> (/w/train.py:90);main (/w/train.py:80);'
        f"accuracy (/w/train.py:40);<listcomp> (/w/train.py:41) 30",
        # the training loop inside the model: a timed phase, not host Python
        f'process {MAIN}:"python train.py";<module> (/w/train.py:90);main (/w/train.py:80);'
        f"call_wrapper ({SITE}/pinchpoint/capture/hooks.py:80);"  # pinchpoint's own pass-through
        f"_call_impl ({SITE}/torch/nn/modules/module.py:1750);forward (/w/model.py:12) 50",
        # a DataLoader worker: the transform, mostly inside numpy
        f'process {MAIN}:"python train.py";process {WORKER}:"python train.py";<module> (/w/train.py:90);'
        f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:300);"
        f"fetch ({SITE}/torch/utils/data/_utils/fetch.py:52);__getitem__ (/w/data.py:20);"
        f"augment (/w/data.py:31);rot90 ({SITE}/numpy/lib/function_base.py:200) 60",
        f'process {WORKER}:"python train.py";<module> (/w/train.py:90);_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:300);'
        f"fetch ({SITE}/torch/utils/data/_utils/fetch.py:52);__getitem__ (/w/data.py:20);decode (/w/data.py:25) 20",
        # another thread of the main process (not the loop)
        f'process {MAIN}:"python train.py";_bootstrap ({STDLIB}/threading.py:990);run ({STDLIB}/threading.py:970) 7',
        "half a line cut by a kill",
        "",
    ]
)


def test_parse_folded_reads_processes_frames_and_counts() -> None:
    stacks, bad = parse_folded(FOLDED, rate_hz=100)
    assert bad == 1
    assert stacks.total == 167
    worker = [s for s in stacks.samples if s.pid == WORKER]
    assert sum(s.count for s in worker) == 80
    leaf = max(worker, key=lambda s: s.count).frames[-1]
    assert leaf == Frame("rot90", f"{SITE}/numpy/lib/function_base.py", 200)
    assert leaf.label == f"rot90 ({SITE}/numpy/lib/function_base.py:200)"
    assert not any("pinchpoint" in f.file for s in stacks.samples for f in s.frames)


def test_the_profile_objects_frames_are_dropped_with_the_captures() -> None:
    """`prof.step()` (`pinchpoint/notebook.py`) is pinchpoint's work, as when it lived in capture/."""
    folded = (
        f"<module> (/w/train.py:9);Profile.step ({SITE}/pinchpoint/notebook.py:73);"
        f"explicit_step ({SITE}/pinchpoint/capture/agent.py:400) 5\n"
    )
    stacks, _ = parse_folded(folded)
    assert [s.frames for s in stacks.samples] == [(Frame("<module>", "/w/train.py", 9),)]


def test_parse_folded_merges_identical_stacks_and_keeps_odd_frames() -> None:
    stacks, bad = parse_folded("a;b (x.py:1) 2\na;b (x.py:1) 3\nthread (0x1f);c 4\n")
    assert bad == 0
    by = {s.frames: s for s in stacks.samples}
    assert by[(Frame("a"), Frame("b", "x.py", 1))].count == 5
    assert by[(Frame("c"),)].thread == "0x1f"


def test_summary_charges_samples_to_the_programs_own_functions() -> None:
    stacks, _ = parse_folded(FOLDED, rate_hz=100)
    summary = stack_summary(stacks, [MAIN], [WORKER], cwd="/w")
    assert summary.loader is not None and summary.host is not None
    assert summary.loader.samples == 80 and summary.loader.seconds == 0.8
    top = summary.loader.top[0]
    assert (top.label, round(top.share, 2)) == ("augment (data.py:31)", 0.75)
    assert top.calls_into == "rot90 (numpy/lib/function_base.py)"
    assert summary.loader.top[1].label == "decode (data.py:25)"
    # host: only the loop's own Python, not the model call, not the other thread
    assert summary.host.samples == 30
    assert summary.host.top[0].label == "accuracy (train.py:40)"  # its list comprehension included
    line = stack_evidence(summary.loader, "in the loaders")
    assert line is not None and line.key == "stacks.top"
    assert line["sampled_ns"] == pytest.approx(0.8e9) and line["samples"] == 80
    hot = line["hot"]
    assert isinstance(hot, tuple) and isinstance(hot[0], tuple)
    label, share, calls_into = hot[0]
    assert (label, calls_into) == ("augment (data.py:31)", "rot90 (numpy/lib/function_base.py)")
    assert share == pytest.approx(0.75)
    assert say(line).startswith("Python stacks (0.8 s of samples in the loaders): augment (data.py:31) 75%")


def test_fetches_in_the_training_process_count_as_loading() -> None:
    text = (
        f'process {MAIN}:"p";<module> (/w/t.py:1);__next__ ({SITE}/torch/utils/data/dataloader.py:700);'
        f"fetch ({SITE}/torch/utils/data/_utils/fetch.py:52);tokenize (/w/t.py:9) 5\n"
    )
    stacks, _ = parse_folded(text)
    summary = stack_summary(stacks, [MAIN], [])
    assert summary.loader is not None and summary.loader.samples == 5 and summary.host is None


def test_pinchpoints_own_fetches_are_not_the_programs_loading() -> None:
    """The loader probe fetches the program's batches in the training process to time them: those
    samples end in pinchpoint's own leaf and are pinchpoint's time, not the loader's (a held-out text
    classifier's evidence read "__getitem__ 75%, mostly inside pinchpoint")."""
    fetch = f"__next__ ({SITE}/torch/utils/data/dataloader.py:700);fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)"
    text = (
        f'process {MAIN}:"p";<module> (/w/t.py:1);{fetch};tokenize (/w/t.py:9) 5\n'
        f'process {MAIN}:"p";<module> (/w/t.py:1);{fetch};tokenize (/w/t.py:9);pinchpoint (<pinchpoint>) 15\n'
    )
    stacks, _ = parse_folded(text)
    summary = stack_summary(stacks, [MAIN], [])
    assert summary.loader is not None and summary.loader.samples == 5


def test_library_frames() -> None:
    assert is_library(Frame("f", f"{SITE}/torch/x.py"))
    assert is_library(Frame("f", f"{STDLIB}/json/decoder.py"))
    assert is_library(Frame("f", "<frozen importlib._bootstrap>"))
    assert not is_library(Frame("f", "/home/me/proj/train.py"))


def test_flamegraph_is_valid_svg_with_every_process_and_tooltips() -> None:
    stacks, _ = parse_folded(FOLDED, rate_hz=100)
    svg = flamegraph_svg(
        stacks, title="train.py <stacks> & more", process_names={WORKER: "DataLoader worker 0"}
    )
    root = ET.fromstring(svg)
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("DataLoader worker 0 (80 samples, 47.90%)") for t in titles)
    assert any(t.startswith(f"process {MAIN} (87 samples") for t in titles)
    assert any("augment (/w/data.py:31) (60 samples" in t for t in titles)


def test_frame_names_xml_cannot_hold_still_make_a_valid_svg() -> None:
    """A native frame or an undecodable file name can bring control characters or lone surrogates;
    the flame graph replaces them (ElementTree refused one such SVG in a test run here)."""
    text = f'process {MAIN}:"p";<module> (/w/t.py:1);f\x1b[0m\x00 (/w/\udce9.py:2);g&<h> (/w/t.py:3) 5\n'
    stacks, _ = parse_folded(text, rate_hz=100)
    root = ET.fromstring(flamegraph_svg(stacks, title="t\x07"))
    titles = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("g&<h> (/w/t.py:3)") for t in titles), titles


def test_speedscope_profiles_per_process_reference_the_frame_table() -> None:
    stacks, _ = parse_folded(FOLDED, rate_hz=100)
    doc = json.loads(json.dumps(speedscope_json(stacks, name="x", process_names={MAIN: "training process"})))
    assert doc["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    names = [p["name"] for p in doc["profiles"]]
    assert names == ["training process", f"process {WORKER}"]
    n = len(doc["shared"]["frames"])
    for p in doc["profiles"]:
        assert p["type"] == "sampled" and p["unit"] == "seconds"
        assert len(p["samples"]) == len(p["weights"])
        assert all(0 <= i < n for s in p["samples"] for i in s)
        assert abs(p["endValue"] - sum(p["weights"])) < 1e-9
    assert abs(sum(sum(p["weights"]) for p in doc["profiles"]) - 1.67) < 1e-9


@given(st.text(max_size=300))
def test_parse_folded_never_raises(text: str) -> None:
    stacks, bad = parse_folded(text)
    assert bad >= 0 and stacks.total >= 0


def test_a_functions_lines_are_summed_and_its_hottest_line_named() -> None:
    text = (
        "".join(
            f'process {WORKER}:"p";<module> (/w/t.py:1);augment (/w/t.py:{line});mean ({SITE}/numpy/m.py:3) {n}\n'
            for line, n in ((30, 2), (36, 7), (41, 1))
        )
        + f'process {WORKER}:"p";<module> (/w/t.py:1);decode (/w/t.py:20) 6\n'
    )
    stacks, _ = parse_folded(text)
    scope = stack_summary(stacks, [MAIN], [WORKER], cwd="/w").loader
    assert scope is not None
    assert [(h.label, round(h.share, 3)) for h in scope.top] == [
        ("augment (t.py:36)", 0.625),
        ("decode (t.py:20)", 0.375),
    ]
