"""Machine facts, torch build facts and thread settings (real machine, real torch)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from typing import Any

import pytest

from pinchpoint.capture.environment import (
    MATRIX_UNIT_FLAGS,
    ML_FLAGS,
    THREAD_ENV_VARS,
    TORCH_CONFIG_KEYS,
    collect_environment,
    parse_config_flags,
    thread_info,
    torch_info,
)


def test_collect_environment_keys_and_types() -> None:
    env = collect_environment()
    json.dumps(env)  # serialisable as is
    assert set(env) >= {"cpu", "memory_bytes", "os", "python", "hostname"}
    cpu = env["cpu"]
    assert set(cpu) >= {"model", "logical_cores", "physical_cores", "usable_cores", "flags", "matrix_units"}
    assert isinstance(cpu["model"], str) and cpu["model"]
    assert isinstance(cpu["logical_cores"], int) and cpu["logical_cores"] >= 1
    assert cpu["physical_cores"] is None or 1 <= cpu["physical_cores"] <= cpu["logical_cores"]
    assert isinstance(cpu["usable_cores"], int)
    assert 1 <= cpu["usable_cores"] <= cpu["logical_cores"]
    assert isinstance(cpu["flags"], list) and set(cpu["flags"]) <= set(ML_FLAGS)
    assert cpu["flags"] == [f for f in ML_FLAGS if f in cpu["flags"]]  # stable order
    assert set(cpu["matrix_units"]) <= set(cpu["flags"]) & set(MATRIX_UNIT_FLAGS)
    assert cpu["quota_cores"] is None or cpu["quota_cores"] > 0
    assert isinstance(env["memory_bytes"], int) and env["memory_bytes"] > 0
    assert env["memory_limit_bytes"] is None or 0 < env["memory_limit_bytes"] < env["memory_bytes"]
    assert env["os"].startswith(platform.system())
    assert env["python"] == platform.python_version()
    assert isinstance(env["hostname"], str)


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="Linux only")
def test_flags_match_proc_cpuinfo() -> None:
    with open("/proc/cpuinfo") as f:
        words: set[str] = set()
        for line in f:
            if line.startswith(("flags", "Features")):
                words = set(line.partition(":")[2].split())
                break
    assert collect_environment()["cpu"]["flags"] == [f for f in ML_FLAGS if f in words]


def test_collect_environment_needs_no_torch() -> None:
    code = (
        "import sys, json\n"
        "from pinchpoint.capture.environment import collect_environment\n"
        "json.dumps(collect_environment())\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_parse_config_flags() -> None:
    text = (
        "PyTorch built with:\n"
        "  - GCC 13.3\n"
        "  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, CUDA_VERSION=12.4, "
        "CXX_FLAGS= -O2 -fPIC -Wall, LAPACK_INFO=mkl, TORCH_VERSION=2.5.0, USE_CUDA=ON, "
        "USE_MKLDNN=ON, USE_OPENMP=ON, USE_ROCM=OFF, \n"
    )
    assert parse_config_flags(text) == [
        "BLAS_INFO=mkl",
        "LAPACK_INFO=mkl",
        "USE_MKLDNN=ON",
        "USE_OPENMP=ON",
        "USE_CUDA=ON",
        "USE_ROCM=OFF",
        "CUDA_VERSION=12.4",
    ]
    assert parse_config_flags("") == []
    assert parse_config_flags("garbage\nBuild settings:\n") == []


def test_never_raise_on_a_broken_torch() -> None:
    info = torch_info(object())
    json.dumps(info)
    assert info["version"] is None and info["config_flags"] == [] and info["cuda_devices"] == []
    threads = thread_info(object())
    assert threads["intra_op"] is None and threads["inter_op"] is None
    assert set(threads["env"]) == set(THREAD_ENV_VARS)


def test_torch_info_with_real_torch() -> None:
    torch: Any = pytest.importorskip("torch")
    was_initialized = torch.cuda.is_initialized()
    info = torch_info(torch)
    json.dumps(info)
    assert info["version"] == str(torch.__version__)
    assert info["cuda"] == torch.version.cuda
    assert info["hip"] == getattr(torch.version, "hip", None)
    assert info["mkl"] == torch.backends.mkl.is_available()
    assert info["mkldnn"] == torch.backends.mkldnn.is_available()
    assert info["openmp"] == torch.backends.openmp.is_available()
    assert info["config_flags"], "this torch prints its build settings"
    for flag in info["config_flags"]:
        key, sep, _ = flag.partition("=")
        assert sep and key in TORCH_CONFIG_KEYS
    # It must not initialise CUDA behind the program's back.
    assert torch.cuda.is_initialized() == was_initialized
    assert info["cuda_initialized"] == was_initialized
    if not was_initialized:
        assert info["cuda_devices"] == []
    for dev in info["cuda_devices"]:
        assert set(dev) == {"name", "capability", "total_memory_bytes", "multiprocessor_count"}


def test_thread_info_with_real_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch: Any = pytest.importorskip("torch")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    info = thread_info(torch)
    json.dumps(info)
    assert info["intra_op"] == torch.get_num_threads()
    assert info["inter_op"] == torch.get_num_interop_threads()
    assert info["env"]["OMP_NUM_THREADS"] == "3"
    assert info["env"]["MKL_NUM_THREADS"] is None
    assert list(info["env"]) == list(THREAD_ENV_VARS)


def test_reading_leaves_thread_settings_to_the_program() -> None:
    pytest.importorskip("torch")
    # A fresh process: set_num_interop_threads only works before the inter-op pool has started.
    code = (
        "import torch\n"
        "from pinchpoint.capture.environment import thread_info, torch_info\n"
        "torch_info(torch); thread_info(torch)\n"
        "torch.set_num_interop_threads(1)\n"
        "torch.set_num_threads(1)\n"
        "print(thread_info(torch)['intra_op'], thread_info(torch)['inter_op'], torch.cuda.is_initialized())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "False"]
