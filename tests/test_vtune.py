"""Intel VTune's CSV reports: the sniff, hotspots and top-down rows into `Stacks`, hostile files, `analyze`.

The fixtures in `data/vtune/` were written by hand from VTune's documented report columns (README.md
there), not produced by VTune; the weights asserted below are their CPU times, summed by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pinchpoint.errors import TraceError
from pinchpoint.ingest import vtune
from pinchpoint.ingest.sniff import stack_file_kind
from pinchpoint.ingest.vtune import looks_like_vtune_csv, read_vtune, time_ns
from pinchpoint.trace.stacks import Stacks

DATA = Path(__file__).resolve().parent / "data"
VTUNE = DATA / "vtune"
HOTSPOTS = VTUNE / "hotspots_torch_cpu.csv"
TOP_DOWN = VTUNE / "top_down_torch_cpu.csv"
WINDOWS = VTUNE / "hotspots_windows_bom_crlf.csv"
FIXTURES = (HOTSPOTS, TOP_DOWN, WINDOWS)
S = 1_000_000_000

BRGEMM = "dnnl::impl::cpu::x64::brgemm_kernel_execute"
JIT_CONV = "_jit_avx2_conv_fwd_kernel_f32"
MM_OUT = "at::native::mm_out_cpu(at::Tensor const&, at::Tensor const&, at::Tensor&)"


def _weights(stacks: Stacks) -> dict[tuple[str, ...], int]:
    """{function names root first: summed count}."""
    out: dict[tuple[str, ...], int] = {}
    for s in stacks.samples:
        key = tuple(f.function for f in s.frames)
        out[key] = out.get(key, 0) + s.count
    return out


def _write(tmp_path: Path, text: str, name: str = "report.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


def _refused(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_vtune(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


# --- the sniff ---


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_the_fixtures_sniff_as_vtune(path: Path) -> None:
    assert looks_like_vtune_csv(path.read_bytes())
    assert stack_file_kind(path) == "vtune"


def test_other_files_in_tests_data_are_not_vtune() -> None:
    perf = sorted((DATA / "perf" / "flamegraph").glob("perf-*.txt"))
    folded = sorted((DATA / "perf" / "flamegraph" / "results").glob("*-collapsed-*.txt"))
    native = sorted((DATA / "perf" / "native").glob("*.txt.gz"))
    kineto = sorted((DATA / "traces").rglob("*.json.gz"))
    csvs = sorted(p for p in DATA.rglob("*.csv") if VTUNE not in p.parents)
    assert perf and folded and native and kineto and csvs
    for path in [*perf, *native, DATA / "perf" / "torch_cpu_clock.txt"]:
        assert stack_file_kind(path) == "perf script", path
    for path in folded:
        assert stack_file_kind(path) == "folded", path
    for path in [*kineto, *csvs]:  # Kineto traces; nsys and TraceLens CSV exports
        assert stack_file_kind(path) is None, path
        assert not looks_like_vtune_csv(path.read_bytes()[:65536]), path


def test_the_sniff_finds_the_columns_by_name_with_any_spacing_case_and_delimiter() -> None:
    for header in (
        "Function\tCPU Time",
        "Module,Function,CPU Time:Self",
        "process;module;FUNCTION;cpu time: self",
        "Function Stack\tCPU Time: Total\tCPU Time: Self",
        "function stack,cpu time:total,CPU TIME:SELF,Module",
        "Function,Function Stack,CPU Time,Module",  # a callstacks report
    ):
        assert looks_like_vtune_csv(f"{header}\nx\n".encode()), header
        assert looks_like_vtune_csv(f"{header}\r\n".encode("utf-16")), header  # with its BOM
    assert looks_like_vtune_csv(b"Column filter is ON.\nProcess;Module;Function;CPU Time\nb;m;f;1.0\n")
    for head in (
        b"",
        b"Function CPU Time\n",  # no delimiter
        b"Function\tWait Time\n",
        b"Function Stack,CPU Time:Total\n",  # no self time: no weights to read
        b"Module,Process,CPU Time\n",
        b"Name,Process,Thread,Trace Type,Timestamp (ns)\n",
        b"main;work;leaf 3\nmain;other 2\n",
        b'{"traceEvents": [{"name": "Function", "cat": "CPU Time"}]}',
        b"Function\x00\tCPU Time\n",
        bytes(range(256)),
    ):
        assert not looks_like_vtune_csv(head), head


# --- what the reports read as ---


def test_a_hotspots_report_reads_one_frame_per_function_with_its_module() -> None:
    stacks, bad = read_vtune(HOTSPOTS)
    assert bad == 0
    assert stacks.rate_hz == 1e9 and stacks.source == HOTSPOTS.name and not stacks.idle_included
    got = {s.frames[0].function: (s.frames[0].file, s.count) for s in stacks.samples}
    assert all(len(s.frames) == 1 for s in stacks.samples)
    assert got == {
        "__kmp_fork_barrier": ("libiomp5.so", 4_812_000_000),
        "_PyEval_EvalFrameDefault": ("libpython3.11.so.1.0", 3_906_000_000),
        JIT_CONV: ("[Dynamic code]", 3_512_000_000),
        BRGEMM: ("libtorch_cpu.so", 2_044_000_000),
        "__kmp_wait_template": ("libiomp5.so", 1_688_000_000),
        "clear_page_erms": ("vmlinux", 1_504_000_000),
        "__memmove_avx_unaligned_erms": ("libc.so.6", 1_252_000_000),
        "dnnl::impl::cpu::x64::jit_avx2_convolution_fwd_t::execute_forward": ("libtorch_cpu.so", 520_000_000),
        "at::native::(anonymous namespace)::add_kernel": ("libtorch_cpu.so", 492_000_000),
        "[Outside any known module]": ("[Unknown]", 270_000_000),
    }
    assert stacks.total == 20 * S


def test_a_top_down_report_rebuilds_each_path_from_the_indentation() -> None:
    stacks, bad = read_vtune(TOP_DOWN)
    assert bad == 0 and stacks.rate_hz == 1e9
    py = ("_start", "_PyEval_EvalFrameDefault")
    worker = ("start_thread", "__kmp_launch_worker")
    assert _weights(stacks) == {  # self times; `Total` and the 0-self rows make no sample
        py: 1_500_000_000,
        (*py, MM_OUT): 200_000_000,
        (*py, MM_OUT, BRGEMM): 2_800_000_000,
        (*py, "__memmove_avx_unaligned_erms"): 500_000_000,
        (*py, "at::native::fill_"): 400_000_000,
        (*py, "at::native::fill_", "clear_page_erms"): 600_000_000,
        (*worker, "__kmp_fork_barrier"): 2_400_000_000,
        (*worker, "__kmp_fork_barrier", BRGEMM): 600_000_000,
        (*worker, "__kmp_invoke_task_func"): 100_000_000,
        (*worker, "__kmp_invoke_task_func", JIT_CONV): 900_000_000,
    }
    assert stacks.total == 10 * S  # the `Total` row's CPU Time:Total
    leaf = {s.frames[-1].function: s.frames[-1].file for s in stacks.samples}
    assert leaf["clear_page_erms"] == "vmlinux" and leaf[JIT_CONV] == "[Dynamic code]"
    assert {f.file for s in stacks.samples for f in s.frames[:1]} == {"python3.11", "libc.so.6"}


def test_a_bom_crlf_semicolon_report_reads_like_any_other() -> None:
    stacks, bad = read_vtune(WINDOWS)
    assert bad == 0
    assert {s.frames[0].label: s.count for s in stacks.samples} == {
        "__kmp_fork_barrier (libiomp5md.dll)": 2_125_000_000,
        "_PyEval_EvalFrameDefault (python311.dll)": 1_500_000_000,
        f"{BRGEMM} (torch_cpu.dll)": 1_250_000_000,
        "memcpy (VCRUNTIME140.dll)": 625_000_000,
        "KiPageFault (ntoskrnl.exe)": 500_000_000,
    }
    assert stacks.total == 6 * S


@pytest.mark.parametrize(
    ("cell", "ns"),
    [
        ("1.234", 1_234_000_000),
        ("1.234s", 1_234_000_000),
        (" 5.436s ", 5_436_000_000),
        ("0s", 0),
        ("0", 0),
        ("", 0),
        ("1,234.5", 1_234_500_000_000),
        ("12,345,678", 12_345_678 * S),
        ("12ms", 12_000_000),
        ("250us", 250_000),
        ("7ns", 7),
        (".5", 500_000_000),
        ("2e-3", 2_000_000),
        ("12.5%", None),
        ("-1.0", None),
        ("nan", None),
        ("inf", None),
        ("1e400", None),
        ("1,23", None),
        ("1.2.3", None),
        ("abc", None),
        ("1 s s", None),
    ],
)
def test_times_parse_robustly(cell: str, ns: int | None) -> None:
    assert time_ns(cell) == ns


def test_column_names_are_matched_whatever_their_spacing_case_and_order(tmp_path: Path) -> None:
    path = _write(tmp_path, "MODULE\tcpu time: self\tfunction\nlibc.so.6\t1.5s\tmemcpy\nm\t0.25\tf\n")
    stacks, bad = read_vtune(path)
    assert bad == 0 and {s.frames[0].label: s.count for s in stacks.samples} == {
        "memcpy (libc.so.6)": 1_500_000_000,
        "f (m)": 250_000_000,
    }
    path = _write(tmp_path, "Function Stack;CPU Time: Total;CPU Time: Self\nTotal;3;0\n a;3;1\n  b;2;2\n")
    assert _weights(read_vtune(path)[0]) == {("a",): S, ("a", "b"): 2 * S}


def test_notes_before_the_header_and_thread_and_pid_columns_are_read(tmp_path: Path) -> None:
    text = (
        "Column filter is ON.\n"
        "Process;PID;Thread;Module;Function;CPU Time\n"
        "python;4242;python (TID: 4243);libgomp.so.1;func@0x194f0;2.5\n"
        "python;4242;python (TID: 4244);libgomp.so.1;func@0x194f0;1.5\n"
        "python;x;;libgomp.so.1;func@0x194f0;1\n"
    )
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 0
    assert {(s.pid, s.thread): s.count for s in stacks.samples} == {
        (4242, "python (TID: 4243)"): 2_500_000_000,
        (4242, "python (TID: 4244)"): 1_500_000_000,
        (None, None): S,
    }


def test_a_callstacks_report_reads_its_function_rows_only(tmp_path: Path) -> None:
    text = (
        "Function,Function Stack,CPU Time,Module\n"
        "grid_intersect,,5.436s,tachyon\n"
        ",intersect_objects,1.918s,tachyon\n"
        ",shader,0s,tachyon\n"
        "render_one_pixel,,0.5s,tachyon\n"
    )
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 0
    assert _weights(stacks) == {("grid_intersect",): 5_436_000_000, ("render_one_pixel",): 500_000_000}


def test_rows_of_the_same_stack_are_summed(tmp_path: Path) -> None:
    text = "Function\tCPU Time\tModule\nf\t1\tm\nf\t2\tm\nf\t4\tother\n"
    stacks, _ = read_vtune(_write(tmp_path, text))
    assert {s.frames[0].label: s.count for s in stacks.samples} == {"f (m)": 3 * S, "f (other)": 4 * S}


def test_an_indented_row_may_quote_its_name_after_the_indentation(tmp_path: Path) -> None:
    text = 'Function Stack,CPU Time:Total,CPU Time:Self\nTotal,2,0\n main,2,1\n  "f(int, int)",1,1\n'
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 0 and _weights(stacks) == {("main",): S, ("main", "f(int, int)"): S}


def test_a_top_down_report_without_a_total_row_roots_at_its_first_level(tmp_path: Path) -> None:
    text = "Function Stack\tCPU Time:Self\n_start\t10.0\n main\t5.0\n  foo\t2.0\n main2\t3.0\nother\t1\n"
    assert _weights(read_vtune(_write(tmp_path, text))[0]) == {
        ("_start",): 10 * S,
        ("_start", "main"): 5 * S,
        ("_start", "main", "foo"): 2 * S,
        ("_start", "main2"): 3 * S,
        ("other",): S,
    }


# --- broken rows and hostile files ---


def test_broken_hotspots_rows_are_counted_and_the_rest_read(tmp_path: Path) -> None:
    text = (
        "Function\tCPU Time\tModule\n"
        "good\t1.0\tm\n"
        "bad_time\tabc\tm\n"
        "percent\t12%\tm\n"
        "\t2.0\tm\n"  # no function name
        "lonely\n"  # no time cell
        '"unbalanced\t3\tm\n'
        "\n"
        "also_good\t0.5\tm\n"
        "cut\t0.2"  # the file ends mid-row
    )
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 6
    assert _weights(stacks) == {("good",): S, ("also_good",): 500_000_000}


def test_a_broken_top_down_row_still_parents_the_rows_under_it(tmp_path: Path) -> None:
    text = (
        "Function Stack,CPU Time:Total,CPU Time:Self,Module\n"
        "Total,4,0,\n"
        " main,4,oops,app\n"  # its time is broken, its place in the tree is not
        "  work,3,3,app\n"
        ",1,1,app\n"  # no name
        "  tail,1,1.0\n"  # a short last row, ended by a newline: its missing Module is no loss
    )
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 2
    assert _weights(stacks) == {("main", "work"): 3 * S, ("main", "tail"): S}
    assert [f.file for s in stacks.samples for f in s.frames] == ["app", "app", "app", ""]


def test_a_huge_line_after_the_header_is_one_skipped_row(tmp_path: Path) -> None:
    text = "Function\tCPU Time\n" + "x" * (5 << 20) + "\tnot a row\nf\t1\n"
    stacks, bad = read_vtune(_write(tmp_path, text))
    assert bad == 1 and _weights(stacks) == {("f",): S}


def test_hostile_files_raise_one_line_trace_errors(tmp_path: Path) -> None:
    header = "Function\tCPU Time:Effective Time\tCPU Time\tModule\n"
    cases = {
        "empty.csv": b"",
        "garbage.bin": bytes(range(256)) * 64,
        "nul.csv": header.encode() + b"f\t1\t1\tm\n\0\0\0",
        "header-only.csv": header.encode(),
        "zero-times.csv": (header + "f\t0\t0\tm\ng\t\t\tm\n").encode(),
        "cut-header.csv": header[:12].encode(),
        "cut-first-row.csv": (header + "__kmp_fork_b").encode(),
        "one-huge-line.csv": b"Function\tCPU Time" + b"x" * (5 << 20),
        "huge-line-then-header.csv": b"y" * (5 << 20) + b"\n" + header.encode(),
        "wrong-columns.csv": b"Name\tDuration\nf\t1\n",
        "text.csv": "\ufffd\u2028 é \x1b[31m\n".encode() * 100,
        "percent.csv": b"Function Stack,CPU Time:Total,CPU Time:Self\nTotal,100.0%,0.0%\n main,100.0%,100.0%\n",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        _refused(tmp_path / name)
    assert "binary" in _refused(tmp_path / "garbage.bin")
    assert "no VTune report header" in _refused(tmp_path / "one-huge-line.csv")
    assert "0 row(s)" in _refused(tmp_path / "header-only.csv")
    assert "percentages" in _refused(tmp_path / "percent.csv")
    assert not looks_like_vtune_csv((tmp_path / "one-huge-line.csv").read_bytes()[:65536])
    _refused(tmp_path / "missing.csv")
    _refused(tmp_path)  # a directory


def test_a_deep_tree_is_cut_at_the_depth_limit(tmp_path: Path) -> None:
    rows = "".join(f"{' ' * d}f{d},1,1\n" for d in range(vtune.MAX_DEPTH + 5))
    stacks, bad = read_vtune(_write(tmp_path, "Function Stack,CPU Time:Total,CPU Time:Self\n" + rows))
    assert bad == 5 and len(stacks.samples) == vtune.MAX_DEPTH
    assert max(len(s.frames) for s in stacks.samples) == vtune.MAX_DEPTH


def test_huge_files_are_refused_before_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as f:
        f.truncate(vtune.MAX_BYTES + 1)  # sparse: nothing written
    assert "MiB" in _refused(huge)


@settings(max_examples=150, deadline=None)
@given(
    header=st.sampled_from(["Function\tCPU Time\tModule\n", "Function Stack,CPU Time:Total,CPU Time:Self\n"]),
    body=st.text(alphabet=st.sampled_from(list(" \t,;\"'\r\n%.-0123456789sfTotal\ufeff\x00")), max_size=300),
)
def test_any_body_reads_or_raises_a_trace_error(
    tmp_path_factory: pytest.TempPathFactory, header: str, body: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "r.csv"
    path.write_text(header + body, encoding="utf-8")
    try:
        stacks, bad = read_vtune(path)
    except TraceError:
        return
    assert bad >= 0 and stacks.total > 0 and all(s.frames and s.count > 0 for s in stacks.samples)


# --- pinchpoint analyze ---


def _analyze(path: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, object] | None]:
    out = tmp_path / "out.json"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "analyze", str(path), "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return res, json.loads(out.read_text()) if out.is_file() else None


def test_analyze_reads_a_hotspots_report_and_names_the_openmp_barrier_share(tmp_path: Path) -> None:
    renamed = tmp_path / "trace.json"  # the name says JSON: the content decides
    renamed.write_bytes(HOTSPOTS.read_bytes())
    res, doc = _analyze(renamed, tmp_path)
    assert res.returncode == 0 and doc is not None, res.stderr
    assert doc["schema"] == "pinchpoint.stacks/1" and doc["format"] == "vtune"
    assert doc["weight"] == 20 * S and doc["weight_unit"] == "ns of CPU" and doc["warnings"] == []
    native = doc["native"]
    assert isinstance(native, dict)
    assert native["shares"] == {
        "page_faults": 0.0752,  # clear_page_erms in vmlinux: the kernel's
        "unmap": 0.0,
        "omp_runtime": 0.325,  # __kmp_fork_barrier + __kmp_wait_template, 6.500 s of 20
        "sched": 0.0,
        "memcpy": 0.0626,
        "python": 0.1953,
        "math": 0.3038,
        "jit_unnamed": 0.0,
        "other": 0.0381,
    }
    assert native["kernels"][0] == {"kernel": JIT_CONV, "isa": "avx2", "share": 0.1756}
    assert "(vtune, 20,000,000,000 ns of CPU)" in res.stdout
    assert "OpenMP runtime (barrier spin, wake-ups)     32.5%" in res.stdout
    assert "Hottest leaf functions" in res.stdout and "24.1%  __kmp_fork_barrier (libiomp5.so)" in res.stdout


def test_analyze_reads_a_top_down_report(tmp_path: Path) -> None:
    res, doc = _analyze(TOP_DOWN, tmp_path)
    assert res.returncode == 0 and doc is not None, res.stderr
    assert doc["format"] == "vtune" and doc["weight"] == 10 * S
    native = doc["native"]
    assert isinstance(native, dict)
    shares = native["shares"]
    assert shares["omp_runtime"] == 0.25 and shares["page_faults"] == 0.06 and shares["math"] == 0.43
    assert "Where the CPU time went" in res.stdout


def test_analyze_refuses_a_broken_report_in_one_line(tmp_path: Path) -> None:
    broken = _write(tmp_path, "Function\tCPU Time\n\x01\x02\tgarbage\n")
    res, doc = _analyze(broken, tmp_path)
    assert res.returncode == 3 and doc is None
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1 and str(broken) in res.stderr
