"""comm.tensor_parallel: tensor parallelism whose per-layer all-reduces move more than data
parallelism's gradients would, priced from the run's own collectives; the capture reads the split from
the parameters (the end-to-end run is examples/tp_oversplit.py's)."""

from __future__ import annotations

import json

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.comm import CommActivity
from pinchpoint.analysis.ops import OpStats
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Category, Finding, FixKind, facts
from pinchpoint.ingest.parallel import tensor_parallel_config
from pinchpoint.report.phrases import say
from pinchpoint.trace.parallel import TensorParallelConfig

MIB = 1 << 20
AR = "functional.all_reduce"


def _config(param_mib: float) -> TensorParallelConfig:
    return TensorParallelConfig(
        degree=2, placements=(("Replicate()", 6), ("Shard(0)", 12), ("Shard(1)", 6)), sharded_params=24,
        param_bytes=int(param_mib * MIB), sharded_bytes=int(param_mib * MIB),
    )  # fmt: skip


def _rank(
    rank: int, comm_ms: float, cfg: TensorParallelConfig | None, mib: float = 24, ops: OpStats | None = None
) -> RankAnalysis:
    """A rank whose 100 ms step spends `comm_ms` in TP's all-reduces, half in forward, half in backward,
    each half moving `mib`."""
    work = 100 - comm_ms
    half = comm_ms / 2 * 1e6
    return make_rank_analysis(
        {"forward": work / 3, "backward": 2 * work / 3, "comm": comm_ms},
        0,
        rank=rank,
        ops=ops,
        comm=CommActivity(
            per_step_ns={},
            mean_ns=comm_ms * 1e6,
            backward_calls=1,
            synced_backwards=0,
            ddp=None,
            tensor_parallel=cfg,
            by_kind={(AR, "forward"): half, (AR, "backward"): half},
            bytes_per_step={(AR, "forward"): mib * MIB, (AR, "backward"): mib * MIB},
        ),
    )


def _found(*ranks: RankAnalysis) -> list[Finding]:
    out = diagnose(make_run_analysis(make_env(cores=2), list(ranks))).findings
    return [f for f in out if f.id in (Category.COMM_TENSOR_PARALLEL, Category.COMM_EXPOSED)]


def test_activations_outweighing_the_gradients_price_data_parallelism() -> None:
    cfg = _config(12)
    (f,) = _found(_rank(0, 40, cfg), _rank(1, 36, cfg))
    assert f.id is Category.COMM_TENSOR_PARALLEL and f.share == pytest.approx(0.40)
    # 48 MiB a step took 40 ms; the 12 MiB of gradients at that rate take 10 ms: 100 -> 70 ms
    assert f.estimated_speedup == pytest.approx(100 / 70)
    assert f.fix_kind is FixKind.DATA_PARALLEL and f.ranks == (0, 1)
    kinds = [say(e) for e in f.evidence if e.key == "comm.tensor_parallel.kind"]
    assert kinds[0].startswith(f"{AR} in ") and "24.0 MiB per step" in kinds[0] and len(kinds) == 2
    assert facts(f)["comm.tensor_parallel.dp"]["ratio"] == pytest.approx(4.0)
    plan = say(next(e for e in f.evidence if e.key == "comm.tensor_parallel.plan"))
    assert "over 2 ranks" in plan and "Shard(0) ×12" in plan and "12.0 MiB" in plan
    assert "DistributedDataParallel" in say(f.snippet) and "data parallelism" in say(f.fix)


def test_a_model_whose_gradients_weigh_as_much_keeps_its_comm_in_comm_exposed() -> None:
    cfg = _config(40)  # 48 MiB of activations against 40 MiB of gradients: the split may be right
    assert [f.id for f in _found(_rank(0, 40, cfg), _rank(1, 40, cfg))] == [Category.COMM_EXPOSED]
    assert [f.id for f in _found(_rank(0, 40, None), _rank(1, 40, None))] == [Category.COMM_EXPOSED]


def test_little_tensor_parallel_time_is_no_finding() -> None:
    cfg = _config(12)
    assert _found(_rank(0, 5, cfg), _rank(1, 5, cfg)) == []  # 5% of the step


def test_the_split_is_read_back_from_its_line() -> None:
    line = {
        "kind": "tensor_parallel", "mesh": [2], "mesh_dims": ["tp"], "placements": {"Shard(0)": 4, "Shard(1)": 2},
        "params": 6, "sharded_params": 6, "param_bytes": 1000, "sharded_bytes": 1000,
    }  # fmt: skip
    cfg = tensor_parallel_config([json.loads(json.dumps(line))])
    assert cfg == TensorParallelConfig(
        degree=2, mesh_dims=("tp",), placements=(("Shard(0)", 4), ("Shard(1)", 2)), sharded_params=6,
        param_bytes=1000, sharded_bytes=1000,
    )  # fmt: skip
    for bad in (
        {**line, "mesh": [1]},
        {**line, "mesh": [2, 2]},
        {**line, "sharded_params": 0},
        {**line, "kind": "x"},
    ):
        assert tensor_parallel_config([bad]) is None
    assert tensor_parallel_config([{**line, "placements": "nope"}]) is not None


def test_the_work_every_rank_repeats_is_priced_by_the_degree() -> None:
    """Forward and backward take 60 ms of the 100 ms step; the op window's matmuls 55 ms of its 110 ms
    steps, so 50 ms of the steady step: the other 10 ms run on the whole batch on every rank."""
    ops = OpStats(
        window_steps=3, window_step_ns=110e6, top_level_ops_per_step=40, median_top_level_op_ns=1e5,
        op_ns_per_step=100e6, matmul_ns_per_step={"c10::BFloat16": 55e6},
    )  # fmt: skip
    cfg = _config(12)
    (f,) = _found(_rank(0, 40, cfg, ops=ops), _rank(1, 40, cfg, ops=ops))
    # 100 - 40 (TP's collectives) + 10 (the gradients' all-reduce) - 10 * (1 - 1/2) (the repeated work)
    assert f.estimated_speedup == pytest.approx(100 / 65)
    said = say(next(e for e in f.evidence if e.key == "comm.tensor_parallel.replicated"))
    assert "10.0 ms per step" in said and "1/2 of the batch" in said and "~5.00 ms less" in said
