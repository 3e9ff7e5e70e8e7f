"""`perf script` text: samples, folding exactly as FlameGraph's stackcollapse-perf.pl, `Stacks`, the sniff.

The oracle is upstream's own: 13 real `perf script` files and what `stackcollapse-perf.pl --OPT` printed for
each (`data/perf/flamegraph/SOURCES.md`). `torch_cpu_clock.txt` was recorded on this project's CI machine
(2 cores, perf 6.1, torch 2.13.0+cpu, two intra-op threads):

    perf record -q -g -F 199 -e cpu-clock -o x.data -- python LOOP.py    # 3 s of `a @ b` and a Conv2d
    perf script -i x.data > torch_cpu_clock.txt
"""

from __future__ import annotations

import gzip
import sqlite3
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinchpoint.errors import TraceError
from pinchpoint.ingest import perf_script
from pinchpoint.ingest.perf_script import (
    collapse,
    format_collapsed,
    looks_like_perf_script,
    parse,
    parse_counted,
    read_perf_script,
)
from pinchpoint.ingest.stacks import MAX_BYTES, read_folded
from pinchpoint.report.flamegraph import flamegraph_svg

DATA = Path(__file__).resolve().parent / "data"
FLAMEGRAPH = DATA / "perf" / "flamegraph"
TORCH = DATA / "perf" / "torch_cpu_clock.txt"
INPUTS = sorted(FLAMEGRAPH.glob("perf-*.txt"))
ORACLES = sorted((FLAMEGRAPH / "results").glob("*-collapsed-*.txt"))
OPTIONS = ("pid", "tid", "kernel", "jit", "all", "addrs")

SAMPLE = """\
java 24636/25607 [000] 4794564.109216:   10101010 cpu-clock:
\t    7f722d142778 Ljava/io/PrintStream;::print(Ljava/lang/String;)V+0x12 (/tmp/perf-19982.map)
\tffffffff8103ce3b native_safe_halt+0x5 ([kernel.kallsyms])
\t               0 [unknown] ([unknown])

V8 WorkerThread 25607 4794564.209216: 5 cpu-clock:
\t          e5f70 read (/lib/x86_64-linux-gnu/libc-2.15.so)
\t          e5f00 [unknown] (/usr/lib/libfoo.so)

"""


def test_the_fixtures_are_all_there() -> None:
    assert len(INPUTS) == 13
    assert len(ORACLES) == 13 * len(OPTIONS)
    for folder in (FLAMEGRAPH, FLAMEGRAPH / "results"):
        assert (folder / "LICENSE-CDDL-1.0.txt").is_file()
    assert (FLAMEGRAPH / "SOURCES.md").is_file()
    assert TORCH.is_file()


@pytest.mark.parametrize("oracle", ORACLES, ids=lambda p: p.stem)
def test_collapse_matches_stackcollapse_perf_exactly(oracle: Path) -> None:
    name, _, option = oracle.stem.rpartition("-collapsed-")
    assert option in OPTIONS
    samples = parse((FLAMEGRAPH / f"{name}.txt").read_text())
    got = format_collapsed(collapse(samples, **{option: True}))
    assert Counter(got.splitlines()) == Counter(oracle.read_text().splitlines())


def test_parse_reads_headers_and_frames_root_first() -> None:
    samples, bad = parse_counted(SAMPLE)
    assert bad == 0
    java, v8 = samples
    assert (java.comm, java.pid, java.tid, java.cpu) == ("java", 24636, 25607, 0)
    assert (java.time_ns, java.period, java.event, java.complete) == (
        4794564109216000,
        10101010,
        "cpu-clock",
        True,
    )
    assert [f.dso for f in java.frames] == ["[unknown]", "[kernel.kallsyms]", "/tmp/perf-19982.map"]
    assert java.frames[1].symbol == "native_safe_halt+0x5"
    assert java.frames[1].address == "ffffffff8103ce3b"
    assert (v8.comm, v8.pid, v8.tid, v8.cpu, v8.period) == ("V8 WorkerThread", None, 25607, None, 5)


def test_a_comm_with_spaces_keeps_them_and_folds_with_underscores() -> None:
    folded = collapse(parse(SAMPLE), tid=True, all=True)
    assert folded == {
        # Java frames are tidied only for a process named exactly `java`, as the oracle has it
        "java-24636/25607;[unknown];native_safe_halt_[k];Ljava/io/PrintStream:::print_[j]": 10101010,
        "V8_WorkerThread-?/25607;[libfoo.so];read": 5,
    }
    assert "java;[unknown];native_safe_halt;java/io/PrintStream:::print" in collapse(parse(SAMPLE))


def test_crlf_reads_as_lf() -> None:
    crlf = SAMPLE.replace("\n", "\r\n")
    assert parse(crlf) == parse(SAMPLE)
    text = (FLAMEGRAPH / "perf-iperf-stacks-pidtid-01.txt").read_text()
    assert collapse(parse(text.replace("\n", "\r\n")), tid=True) == collapse(parse(text), tid=True)


def test_a_truncated_last_sample_is_kept_by_parse_and_dropped_by_collapse() -> None:
    cut = SAMPLE + "java 1/2 3.5: 7 cpu-clock:\n\t    7f00 main (/bin/x)\n\t    7f00 mem"
    samples, bad = parse_counted(cut)
    assert bad == 1  # the half-written frame line
    assert not samples[-1].complete
    assert [f.symbol for f in samples[-1].frames] == ["main"]
    assert collapse(samples) == collapse(parse(SAMPLE))  # as the script: no blank line, no sample


def test_only_the_first_event_type_is_kept_unless_told() -> None:
    text = "ab 1 1.0: 3 cycles:\n\t1 f (x)\n\nab 1 2.0: 4 instructions:\n\t1 g (x)\n\n"
    assert collapse(parse(text)) == {"ab;f": 3}
    assert collapse(parse(text), event_filter="instructions") == {"ab;g": 4}


def test_unreadable_lines_are_counted() -> None:
    samples, bad = parse_counted("\t1 orphan (x)\n" + SAMPLE + "garbage\n")
    assert len(samples) == 2
    assert bad == 2


def test_hostile_long_lines_parse_without_backtracking_for_ever() -> None:
    """Each line would take Python's regex engine minutes matched with the script's own patterns."""
    n = 100_000
    lines = [
        "ab " + "1" * n + "x",
        "a" + " " * n + "x",
        "ab 1 " + ": 1" * n,
        "    " + "a" * n,
        "    a" + " (" * n,
    ]
    text = "ab 1 1.0: 1 cycles:\n" + "\n".join(lines) + "\n\t7f " + ".(" * n + "+0x1" * n + " (x)\n\n"
    samples, bad = parse_counted(text)
    assert len(samples) == 2  # `ab 1 : 1: 1...` is a header
    assert bad == 4
    assert sum(collapse(samples, all=True).values()) == 1


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab 0123:/[]()+x;->\t\r\n#Lé")), max_size=300))
def test_any_text_parses_and_folds_without_raising(text: str) -> None:
    samples, _ = parse_counted(text)
    for option in OPTIONS:
        collapse(samples, **{option: True})


@pytest.mark.parametrize("path", [*INPUTS, TORCH], ids=lambda p: p.stem)
def test_read_perf_script_weighs_as_much_as_the_collapsed_stacks(path: Path) -> None:
    stacks, bad = read_perf_script(path)
    assert bad == 0
    # (as the script reads it, with the blank line a file that ends mid-sample lacks: pinchpoint, as
    # speedscope, keeps that last sample)
    assert stacks.total == sum(collapse(parse(path.read_text() + "\n\n")).values())
    assert stacks.source == path.name


def test_read_perf_script_frames_carry_the_dso_and_the_thread() -> None:
    stacks, _ = read_perf_script(FLAMEGRAPH / "perf-iperf-stacks-pidtid-01.txt")
    assert stacks.rate_hz is None  # cpu-clock, but this perf printed no periods
    assert 27409 in {s.pid for s in stacks.samples}
    assert all(s.thread and s.thread.isdigit() for s in stacks.samples)
    assert any(f.file.endswith("/vmlinux") for s in stacks.samples for f in s.frames)
    rust, _ = read_perf_script(FLAMEGRAPH / "perf-rust-Yamakaky-dcpu.txt")  # perf 4.8+: `symbol+0x1d`
    assert not any("+0x" in f.function for s in rust.samples for f in s.frames)


def test_a_torch_program_on_this_machine_reads_and_folds() -> None:
    stacks, bad = read_perf_script(TORCH)
    assert bad == 0
    assert stacks.rate_hz == 1e9  # cpu-clock periods are nanoseconds
    assert 1.0 < stacks.total / stacks.rate_hz < 60.0
    dsos = {f.file.rsplit("/", 1)[-1] for s in stacks.samples for f in s.frames}
    assert "libtorch_cpu.so" in dsos
    assert any(d.startswith("libgomp") for d in dsos)
    functions = {f.function for s in stacks.samples for f in s.frames}
    assert any(f.startswith("dnnl::") for f in functions)  # oneDNN, linked into libtorch_cpu
    folded = collapse(parse(TORCH.read_text()), tid=True)
    assert all(stack.startswith("python-?/") for stack in folded)
    svg = flamegraph_svg(stacks, title="torch")
    assert ET.fromstring(svg).tag.endswith("svg")


def test_gzip_compressed_text_reads_like_the_text(tmp_path: Path) -> None:
    gz = tmp_path / "native.txt.gz"
    gz.write_bytes(gzip.compress(TORCH.read_bytes()))
    assert read_perf_script(gz)[0].samples == read_perf_script(TORCH)[0].samples
    assert looks_like_perf_script(gz.read_bytes()[:4096])


def _refused(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_perf_script(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_hostile_files_raise_one_line_trace_errors(tmp_path: Path) -> None:
    cases = {
        "empty.txt": b"",
        "garbage.bin": bytes(range(256)) * 64,
        "perf.data": b"PERFILE2" + bytes(1000),
        "utf8-garbage.txt": "\ufffd\u2028 é \x1b[31m\n".encode() * 100,
        "headers.txt": b"java 1 1.0: 1 cycles:\n\njava 1 2.0: 1 cycles:\n\n",
        "comments.txt": b"# ========\n# captured on: today\n",
        "cut.gz": gzip.compress(SAMPLE.encode())[:40],
        "bad.gz": b"\x1f\x8b" + bytes(100),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        _refused(tmp_path / name)
    assert "perf record -g" in _refused(tmp_path / "headers.txt")
    assert "perf script -i" in _refused(tmp_path / "perf.data")
    _refused(tmp_path / "missing.txt")
    _refused(tmp_path)  # a directory


def test_huge_files_are_refused_before_being_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as f:
        f.truncate(MAX_BYTES + 1)  # sparse: nothing written
    assert "MiB" in _refused(huge)
    monkeypatch.setattr(perf_script, "MAX_BYTES", 1024)
    bomb = tmp_path / "bomb.txt.gz"
    bomb.write_bytes(gzip.compress(SAMPLE.encode() * 100))
    assert "MiB" in _refused(bomb)


@pytest.mark.parametrize("path", [*INPUTS, TORCH], ids=lambda p: p.stem)
def test_the_sniff_knows_perf_script(path: Path) -> None:
    assert looks_like_perf_script(path.read_bytes()[: perf_script.SNIFF_BYTES])


def test_the_sniff_refuses_other_traces(tmp_path: Path) -> None:
    kineto = next((DATA / "traces" / "kineto_tb_plugin").rglob("*.json.gz"))
    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("create table t (x)")
    con.close()
    folded = b'process 100:"python train.py";<module> (/w/train.py:90);main (/w/train.py:80) 30\n' * 20
    others = {
        "kineto": gzip.decompress(kineto.read_bytes())[:4096],
        "kineto.gz": kineto.read_bytes()[:4096],
        "json": b'{"traceEvents": [{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 3}]}',
        "sqlite": db.read_bytes()[:4096],
        "folded": folded,
        "folded flamegraph": b"java;start_thread;JavaMain 12\nswapper;cpu_idle 99\n",
        "perf report": b"# ========\n# captured on: today\n# Samples: 1K of event 'cycles'\n# Overhead  Command\n",
        "empty": b"",
    }
    for name, head in others.items():
        assert not looks_like_perf_script(head), name


FOLDED = "main;work;leaf 3\nmain;other 2\nhalf a line\n"


@pytest.mark.parametrize(
    "encoding", ["utf-16", "utf-16-le-bom", "utf-16-be-bom", "utf-8-sig", "utf-8-crlf", "utf-16-crlf"]
)
def test_read_folded_reads_utf16_and_crlf(tmp_path: Path, encoding: str) -> None:
    text = FOLDED.replace("\n", "\r\n") if encoding.endswith("crlf") else FOLDED
    codec = encoding.removesuffix("-crlf")
    if codec.endswith("-bom"):
        data = ("\ufeff" + text).encode(codec.removesuffix("-bom"))
    else:
        data = text.encode(codec)
    path = tmp_path / "stacks.txt"
    path.write_bytes(data)
    stacks, bad = read_folded(path)
    assert bad == 1
    assert stacks.total == 5
    assert {tuple(f.function for f in s.frames) for s in stacks.samples} == {
        ("main", "work", "leaf"),
        ("main", "other"),
    }


@pytest.mark.parametrize("reader", ["perf script", "folded"])
def test_random_damage_gives_a_report_or_one_trace_error(tmp_path: Path, reader: str) -> None:
    """Fuzz: a real file with bytes overwritten at random and cut at random, through the whole stack-file
    report `analyze` prints: it reads, or refuses in one line; nothing else escapes."""
    import random

    from pinchpoint.pipeline.stack_files import report_stack_file

    folded = [p for p in ORACLES if b";" in p.read_bytes()[:4096] and b"CDDL" not in p.read_bytes()[:4096]]
    source = TORCH if reader == "perf script" else max(folded, key=lambda p: p.stat().st_size)
    data = source.read_bytes()[:200_000]
    rng = random.Random(19)
    outcomes: Counter[str] = Counter()
    for i in range(30):
        damaged = bytearray(data)
        for _ in range(20):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        path = tmp_path / f"damaged-{i}.txt"
        path.write_bytes(bytes(damaged[: rng.randrange(len(damaged) // 2, len(damaged) + 1)]))
        try:
            doc = report_stack_file(path)
            outcomes["read" if doc is not None else "not a stack file"] += 1
        except TraceError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
    assert outcomes["read"] > 0, outcomes  # most damage leaves most of the samples readable


def test_stack_files_as_tolerant_as_speedscope(tmp_path: Path) -> None:
    """The three held-out shapes: a perf file whose only sample has no closing newline, a folded file
    with `#` and `//` comments and one malformed line, and a UTF-16 folded file with CRLF and no
    final newline. Each reads; the malformed line is counted in the report's warnings."""
    from pinchpoint.ingest.sniff import stack_file_kind
    from pinchpoint.pipeline.stack_files import report_stack_file

    perf = tmp_path / "one.txt"
    perf.write_text(
        "python 7/7 1.0: 250000 cpu-clock:\n\t7f00 sgemm_ (/lib/libtorch_cpu.so)\n\t7f01 main (/bin/python)"
    )
    assert stack_file_kind(perf) == "perf script"
    stacks, bad = read_perf_script(perf)
    assert bad == 0 and [f.function for f in stacks.samples[0].frames] == ["main", "sgemm_"]
    assert collapse(parse(perf.read_text())) == {}  # (the script itself drops it: `collapse` stays exact)

    folded = tmp_path / "stacks.folded"
    folded.write_text(
        "# py-spy record -o stacks.folded\n// generated\nmain;train;step 40\nmain;train;load 10\n"
        "this line is not a stack\nmain;eval 5\n"
    )
    assert stack_file_kind(folded) == "folded"
    doc = report_stack_file(folded)
    assert doc is not None and doc.weight == 55
    assert doc.warnings == ("1 line(s) could not be read and were skipped",)

    wide = tmp_path / "wide.folded"
    wide.write_bytes("main;train;step 3\r\nmain;eval 1".encode("utf-16"))
    assert stack_file_kind(wide) == "folded"
    stacks, bad = read_folded(wide)
    assert bad == 0 and sum(s.count for s in stacks.samples) == 4


def test_a_json_trace_is_never_sniffed_as_folded_stacks(tmp_path: Path) -> None:
    from pinchpoint.ingest.sniff import stack_file_kind

    trace = tmp_path / "trace.json"
    trace.write_text('{\n"traceEvents": [\n{"name": "a;b", "pid": 1\n}\n],\n"x": 3\n}\n')
    assert stack_file_kind(trace) is None
