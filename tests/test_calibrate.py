"""`pinchpoint calibrate` (CPU here; the CUDA path runs in scripts/gpu_check.sh), its cache and the
datasheet table it compares against."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinchpoint.analysis.datasheet import gpu_peaks
from pinchpoint.analysis.gpu.tensor_cores import on_matrix_units
from pinchpoint.cli.calibrate_cmd import render
from pinchpoint.cli.main import main
from pinchpoint.ingest.ceilings import gpu_matmul_flops, load_cached

H200_CEILINGS = (
    Path(__file__).parent / "data" / "rundirs" / "h200" / "home" / "ceilings" / "d0a0467394c6.json"
)


def test_calibrate_measures_the_cpu_and_caches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("PINCHPOINT_HOME", str(tmp_path / "home"))
    out = tmp_path / "ceilings.json"
    assert main(["calibrate", "--device", "cpu", "-q", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (cpu,) = result["devices"]
    assert cpu["device"] == "cpu" and cpu["threads"] >= 1
    assert set(cpu["matmul_flops"]) == {"float32", "bfloat16", "float16"}
    assert all(v > 1e8 for v in cpu["matmul_flops"].values())  # > 0.1 GFLOP/s: it really ran
    assert cpu["memory_bytes_per_s"] > 1e8
    cached = load_cached(result["machine_key"])
    assert cached == result


def test_calibrate_refuses_a_cuda_device_it_cannot_see(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["calibrate", "--device", "cuda:0"]) == 2
    err = capsys.readouterr().err
    assert "sees no CUDA device" in err and len(err.strip().splitlines()) == 1


def test_cached_gpu_ceilings_are_found_by_device_name() -> None:
    ceilings = json.loads(H200_CEILINGS.read_text())
    flops = gpu_matmul_flops(ceilings, "NVIDIA H200")
    assert flops is not None and flops["bfloat16"] / flops["float32"] > 10
    assert gpu_matmul_flops(ceilings, "NVIDIA A100-SXM4-80GB") is None


def test_render_compares_measured_with_the_datasheet() -> None:
    text = render(json.loads(H200_CEILINGS.read_text()))
    assert "datasheet (H200 SXM)" in text
    assert "h2d pinned" in text and "h2d pageable" in text


@pytest.mark.parametrize(
    ("name", "peaks"),
    [
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("AMD Instinct MI300X", None),
        (None, None),
    ],
)
def test_datasheet_lookup(name: str | None, peaks: str | None) -> None:
    found = gpu_peaks(name)
    assert (found.name if found else None) == peaks


@pytest.mark.parametrize(
    ("kernel", "on_tc"),
    [
        # seen on an H200, fp32 with TF32 off: the xmma framework's scalar-FMA path
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize256x64x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel",
            False,
        ),
        (
            "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)",
            False,
        ),
        # the same machine under bf16 autocast: cuBLASLt's nvjet kernels
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT", True),
        (
            "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
            True,
        ),
    ],
)
def test_tensor_core_path_from_kernel_names(kernel: str, on_tc: bool) -> None:
    assert on_matrix_units(kernel) is on_tc
