"""Native stacks (perf): which cause each sample is charged to, and the causes the examples plant, read
from real `perf script` files of them (tests/data/perf/native/SOURCES.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pinchpoint.analysis.native import NativeBreakdown, cause, isa_of, kernel_family, native_breakdown
from pinchpoint.ingest.perf_script import read_perf_script
from pinchpoint.trace.stacks import Frame, Stacks, StackSample
from programs import CONTENDED_CORES, foreign_cores

DATA = Path(__file__).resolve().parent / "data" / "perf" / "native"
K = "[kernel.kallsyms]"
TORCH = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"
GOMP = "/venv/lib/python3.11/site-packages/torch/lib/libgomp.so.1"


def _frames(*leaf_first: tuple[str, str]) -> tuple[Frame, ...]:
    return tuple(Frame(function=s, file=d) for s, d in reversed(leaf_first))


@pytest.mark.parametrize(
    ("leaf_first", "want"),
    [
        ([("clear_page_erms", K), ("do_anonymous_page", K), ("at::native::add", TORCH)], "page_faults"),
        ([("zap_pte_range", K), ("__x64_sys_munmap", K), ("munmap", "libc.so.6")], "unmap"),
        ([("[unknown]", GOMP), ("at::parallel_for", TORCH)], "omp_runtime"),
        ([("_raw_spin_unlock", K), ("futex_wake", K), ("[unknown]", GOMP)], "omp_runtime"),
        ([("__schedule", K), ("futex_wait", K), ("pthread_cond_wait", "libc.so.6")], "sched"),
        ([("__memmove_avx_unaligned_erms", "libc.so.6")], "memcpy"),
        ([("_PyEval_EvalFrameDefault", "/usr/lib/libpython3.11.so.1.0")], "python"),
        ([("mkl_blas_def_sgemm_kernel_0_zen+0x172", TORCH)], "math"),
        ([("jit_avx2_gemm_f32_kernel", "perf-123.map")], "math"),
        ([("[unknown]", "perf-123.map")], "jit_unnamed"),
        ([("at::native::vectorized_loop", TORCH)], "other"),
    ],
)
def test_each_sample_is_charged_to_the_first_cause_from_its_leaf(
    leaf_first: list[tuple[str, str]], want: str
) -> None:
    assert cause(_frames(*leaf_first)) == want


def test_kernel_names_lose_offsets_and_arguments_and_name_their_instruction_set() -> None:
    assert kernel_family("mkl_blas_def_sgemm_kernel_0_zen+0x172") == "mkl_blas_def_sgemm_kernel_0_zen"
    gemm = (
        "at::native::cpublas::(anonymous namespace)::cpublas_gemm_impl(c10::ScalarType, long)::"
        "{lambda()#1}::operator()() const"
    )
    assert kernel_family(gemm) == "at::native::cpublas::{anon}::cpublas_gemm_impl"
    assert kernel_family("gemm_transb_impl<c10::BFloat16, float>") == "gemm_transb_impl"
    assert isa_of("mkl_blas_def_sgemm_kernel_0_zen") == "MKL's non-Intel path (def, Zen kernels)"
    assert isa_of("mkl_blas_def_sgemm_scopy_down16_bdz") == "MKL's non-Intel path (def)"
    assert isa_of("at::native::AVX2::bf16_dot_with_fp32_arith") == "avx2"
    assert isa_of("dnnl::impl::cpu::x64::brgemm_kernel_avx512_core_amx") == "avx512_core_amx"
    assert isa_of(kernel_family(gemm)) == "reference (torch's fallback gemm)"
    assert isa_of("at::native::add_kernel") is None


def test_the_breakdown_counts_weights_threads_and_kernels() -> None:
    math = _frames(("mkl_blas_avx2_sgemm_kernel+0x10", TORCH))
    fault = _frames(("clear_page_erms", K), ("do_anonymous_page", K), ("at::native::fill", TORCH))
    samples = [StackSample(frames=math, count=60, pid=1, thread=str(t)) for t in range(4)]
    samples += [StackSample(frames=fault, count=60, pid=1, thread="9")]
    samples += [StackSample(frames=math, count=5, pid=2, thread="10")]  # another rank's process
    got = native_breakdown(Stacks(samples=tuple(samples)), pids={1})
    assert got is not None and got.total == 300 and got.threads == 5 and got.busy_threads == 5
    assert got.shares["math"] == pytest.approx(0.8) and got.shares["page_faults"] == pytest.approx(0.2)
    assert got.kernels[0].family == "mkl_blas_avx2_sgemm_kernel" and got.kernels[0].isa == "avx2"
    assert got.isa_shares == {"avx2": 1.0}
    assert native_breakdown(Stacks(samples=())) is None


def _real(name: str) -> NativeBreakdown:
    stacks, _ = read_perf_script(DATA / f"{name}.txt.gz")
    got = native_breakdown(stacks)
    assert got is not None
    return got


def test_allocator_churn_shows_as_page_faults_that_its_fix_removes() -> None:
    churn, fixed = _real("churn"), _real("churn_fix")
    assert churn.shares["page_faults"] >= 0.05, churn.shares
    assert churn.shares["page_faults"] > 2 * fixed.shares["page_faults"], (churn.shares, fixed.shares)


def test_oversubscription_shows_as_more_busy_threads_than_cores() -> None:
    over, fixed = _real("oversub"), _real("oversub_fix")
    assert over.busy_threads >= 8 and fixed.busy_threads <= 3, (over, fixed)


def test_bf16_without_native_bf16_runs_torchs_reference_gemm_where_fp32_runs_mkl() -> None:
    fp32, bf16 = _real("fp32"), _real("bf16")
    assert fp32.kernels[0].family.startswith("mkl_blas_") and fp32.kernels[0].isa is not None
    assert bf16.kernels[0].isa == "reference (torch's fallback gemm)", bf16.kernels
    assert bf16.shares["math"] > 0.5


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed (Debian: linux-perf)")
def test_run_native_names_allocator_churn_from_its_page_faults(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    example = Path(__file__).resolve().parent.parent / "examples" / "allocator_churn.py"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "--native", "-o", str(tmp_path / "run"), "--",
         sys.executable, str(example), "--steps", "40"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    if any("native stacks were asked for but none" in w for w in report["warnings"]):
        pytest.skip("perf may not sample here: " + " ".join(report["warnings"]))
    native = report["ranks"][0]["native"]
    assert native["shares"]["page_faults"] >= 0.03 and native["kernels"], native
    churns = [f for f in report["findings"] if f["id"] == "memory.pressure"]
    if not churns:  # beside a busy process the fault cost shrinks below the rule's threshold
        if foreign_cores(report) >= CONTENDED_CORES:
            return
        # Idle, the churn's price is near the rule's 5% on this example (×1.06 and ×1.17 in two runs
        # here; its glibc fix measured ×1.00-1.22 between days): what perf saw is asserted above.
        pytest.skip(
            "memory.pressure not reported in this run (its price fell under the rule's threshold: "
            f"native page-fault share {native['shares']['page_faults']:.0%}); the ordering is left unchecked"
        )
    (churn,) = churns
    assert any("faulting pages in and zeroing them" in line for line in churn["evidence"]), churn
    assert (tmp_path / "run" / "native.txt.gz").is_file() and not (
        tmp_path / "run" / "native.perf.data"
    ).exists()


def _analyze(path: Path, tmp_path: Path) -> tuple[int, str, dict[str, object] | None]:
    import json
    import subprocess
    import sys

    out = tmp_path / "r.json"
    res = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "analyze", str(path), "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    doc = json.loads(out.read_text()) if out.is_file() else None
    if doc is not None:  # the file validates against its schema and reads back as the typed document
        import jsonschema

        from pinchpoint.report.stacks_doc import StacksDoc, stacks_schema

        jsonschema.Draft202012Validator(stacks_schema()).validate(doc)
        assert StacksDoc.from_dict(doc).to_dict() == doc
    return res.returncode, res.stdout + res.stderr, doc


def test_analyze_reads_perf_script_by_content_and_names_the_native_causes(tmp_path: Path) -> None:
    renamed = tmp_path / "trace.json"  # the name says JSON: the content decides
    renamed.write_bytes((DATA / "churn.txt.gz").read_bytes())
    code, text, doc = _analyze(renamed, tmp_path)
    assert code == 0 and doc is not None, text
    assert doc["schema"] == "pinchpoint.stacks/1" and doc["format"] == "perf script"
    native = doc["native"]
    assert isinstance(native, dict) and native["shares"]["page_faults"] >= 0.05
    assert "page faults and zeroing" in text and "Hottest leaf functions" in text


def test_analyze_reads_folded_stacks_with_kernel_frames(tmp_path: Path) -> None:
    folded = tmp_path / "stacks.folded"
    folded.write_text(
        "python;main;at::native::fill;asm_exc_page_fault_[k];clear_page_erms_[k] 30\r\n"
        "python;main;mkl_blas_avx2_sgemm_kernel 70\r\n",
        encoding="utf-16",
    )
    code, text, doc = _analyze(folded, tmp_path)
    assert code == 0 and doc is not None, text
    assert doc["format"] == "folded" and doc["weight"] == 100
    native = doc["native"]
    assert isinstance(native, dict) and native["shares"]["page_faults"] == pytest.approx(0.3)
    assert native["kernels"][0]["isa"] == "avx2"
