"""comm.exposed in run mode: communication per step, transfer vs waiting across ranks, the rule, and
the capture of collectives and DDP in a real (one-rank, gloo) program."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.comm import comm_activity, cross_rank_comm
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import facts
from pinchpoint.diagnosis.rules.comm import comm_exposed
from pinchpoint.report.phrases import say
from pinchpoint.trace.run import DdpConfig, Interval, Phase, RankData, Step, StepKind

MS = 1_000_000
ENV = make_env(cores=2)
DDP = DdpConfig(t_ns=0, backend="gloo", world_size=2, devices=("cpu",), params=6, grad_bytes=32 << 20)


def _steps(
    n: int, micro: int, fwd: float, bwd: float, waits: list[float], opt: float = 3.0
) -> tuple[Step, ...]:
    """`n` steps of `micro` forward+backward pairs (ms); micro-batch j's backward ends with a comm
    wait of waits[j] ms inside it (as `dist_hooks` records DDP's all-reduce wait), then the optimizer."""
    out, t = [], 0
    for i in range(n):
        start, ivs = t, []
        for j in range(micro):
            ivs.append(Interval(phase=Phase.FORWARD, start_ns=t, end_ns=t + round(fwd * MS)))
            t += round(fwd * MS)
            end = t + round((bwd + waits[j]) * MS)
            ivs.append(Interval(phase=Phase.BACKWARD, start_ns=t, end_ns=end))
            if waits[j]:
                ivs.append(Interval(phase=Phase.COMM, start_ns=end - round(waits[j] * MS), end_ns=end))
            t = end
        ivs.append(Interval(phase=Phase.OPTIMIZER, start_ns=t, end_ns=t + round(opt * MS)))
        t += round(opt * MS)
        out.append(Step(index=i, kind=StepKind.TRAIN, start_ns=start, end_ns=t, intervals=tuple(ivs)))
    return tuple(out)


def _rank(rank: int, steps: tuple[Step, ...], ddp: DdpConfig | None = DDP) -> RankAnalysis:
    data = RankData(rank=rank, steps=steps, ddp=(ddp,) if ddp else ())
    return replace(make_rank_analysis(steps=steps, rank=rank), comm=comm_activity(data), local_ranks=2)


def test_accumulation_without_no_sync_is_named_with_the_no_sync_fix() -> None:
    # 4 micro-batches: forward 5 ms, backward 10 ms (2x forward: no contention), each waiting 10 ms.
    steps = _steps(12, 4, 5.0, 10.0, [10.0] * 4)
    f = comm_exposed([_rank(0, steps), _rank(1, steps)])
    assert f is not None
    stated = facts(f)
    assert stated["comm.exposed.no_sync_fix"]["micro_batches"] == 4
    assert "comm.exposed.no_sync_snippet" in stated
    assert stated["comm.exposed.no_sync_title"]["name"] == "Communication is not hidden behind compute"
    step = 4 * 25.0 + 3.0
    assert abs(f.share - 40.0 / step) < 1e-6  # the transfer: 4 waits of 10 ms
    # One all-reduce instead of four: 30 ms of the 40 go.
    assert abs(f.estimated_speedup - step / (step - 30.0)) < 1e-6
    assert dict(stated["comm.exposed.synced_backwards"].values) == {"backwards": 4, "synced": 4}
    after = stated["comm.exposed.no_sync_after"]
    assert after["after_ns"] == pytest.approx((step - 30.0) * MS)
    assert after["step_ns"] == pytest.approx(step * MS)
    assert f.ranks == (0, 1)


def test_accumulation_whose_some_all_reduces_overlapped_is_still_told_no_sync() -> None:
    # 4 micro-batches all-reducing, two of them hidden behind their backward: two waits seen.
    steps = _steps(12, 4, 5.0, 10.0, [0.0, 12.0, 0.0, 12.0])
    f = comm_exposed([_rank(0, steps), _rank(1, steps)])
    assert f is not None
    stated = facts(f)
    assert stated["comm.exposed.no_sync_fix"]["micro_batches"] == 4
    assert dict(stated["comm.exposed.synced_backwards"].values) == {"backwards": 4, "synced": 2}


def test_transfer_is_the_least_rank_and_waiting_for_a_late_rank_is_not_counted() -> None:
    fast = _steps(12, 1, 20.0, 40.0, [30.0])  # rank 0 waits 30 ms: 10 ms transfer + 20 ms for rank 1
    slow = _steps(12, 1, 40.0, 40.0, [10.0])
    r0, r1 = _rank(0, fast), _rank(1, slow)
    assert r0.comm is not None and r1.comm is not None
    cross = cross_rank_comm([(0, r0.comm), (1, r1.comm)])
    assert cross is not None and cross.matched_steps == 10  # after the 2 warm-up steps
    assert (
        abs(cross.transfer_ns - 10 * MS) < 1 and abs(cross.wait_ns[0] - 20 * MS) < 1 and cross.wait_ns[1] == 0
    )
    f = comm_exposed([r0, r1])
    assert f is not None
    stated = facts(f)
    assert "comm.exposed.less_often_fix" in stated
    transfer = stated["comm.exposed.transfer"]
    assert transfer["steps"] == 10 and transfer["transfer_ns"] == pytest.approx(10 * MS)
    assert transfer["wait_ns"] == ((0, pytest.approx(20 * MS)), (1, 0))
    # Per sample, all-reducing every second batch halves the 10 ms transfer (no contention: neither
    # backward exceeds twice its forward); both ranks take 93 ms a step.
    assert abs(f.estimated_speedup - 2 * 93.0 / (2 * 93.0 - 10.0)) < 1e-6
    saving = stated["comm.exposed.less_often"]
    assert saving["cost_ns"] == pytest.approx(10 * MS) and saving["per_batch_ns"] == pytest.approx(5 * MS)


def test_on_gpus_the_general_advice_is_compression() -> None:
    gpu = replace(DDP, devices=("cuda",), backend="nccl")
    steps = _steps(12, 1, 20.0, 40.0, [20.0])
    f = comm_exposed([_rank(0, steps, gpu), _rank(1, steps, gpu)])
    assert f is not None
    stated = facts(f)
    assert "comm.exposed.compression_snippet" in stated and "comm.exposed.fewer_bytes_fix" in stated
    step = 83.0
    assert abs(f.estimated_speedup - step / (step - 10.0)) < 1e-6
    assert stated["comm.exposed.fewer_bytes"]["after_ns"] == pytest.approx((step - 10.0) * MS)
    ddp = stated["comm.exposed.ddp"]
    assert (ddp["backend"], ddp["world_size"], ddp["grad_bytes"]) == ("nccl", 2, 32 << 20)
    assert ddp["bucket_bytes"] is None and ddp["hook"] is None


def test_accumulation_that_already_uses_no_sync_gets_the_general_advice() -> None:
    steps = _steps(12, 4, 5.0, 10.0, [0.0, 0.0, 0.0, 30.0])
    f = comm_exposed([_rank(0, steps), _rank(1, steps)])
    assert f is not None
    stated = facts(f)
    assert "comm.exposed.no_sync_title" not in stated and "comm.exposed.less_often_fix" in stated


def test_a_slow_backward_on_cpu_counts_as_the_all_reduce_sharing_the_cores() -> None:
    # Backward computes 30 ms against a 5 ms forward: 20 ms beyond 2x forward, charged to the all-reduce.
    steps = _steps(12, 4, 5.0, 30.0, [10.0] * 4)
    f = comm_exposed([_rank(0, steps), _rank(1, steps)])
    assert f is not None
    step = 4 * 45.0 + 3.0
    cost = 40.0 + 4 * 20.0
    assert abs(f.share - cost / step) < 1e-6
    assert abs(f.estimated_speedup - step / (step - cost * 3 / 4)) < 1e-6
    contention = facts(f)["comm.exposed.contention"]
    # Per step, 4 micro-batches: backward 4 x 30 ms against forward 4 x 5 ms, 4 x 20 ms beyond 2x forward.
    assert contention["backward_ns"] == pytest.approx(120 * MS)
    assert contention["forward_ns"] == pytest.approx(20 * MS)
    assert contention["contention_ns"] == pytest.approx(80 * MS)
    # The same on a GPU model: no CPU contention is assumed.
    gpu = replace(DDP, devices=("cuda",))
    g = comm_exposed([_rank(0, steps, gpu), _rank(1, steps, gpu)])
    assert g is not None and abs(g.share - 40.0 / step) < 1e-6


@pytest.mark.parametrize("wait_ms", [0.0, 2.0])
def test_little_or_no_communication_is_not_a_finding(wait_ms: float) -> None:
    steps = _steps(12, 1, 20.0, 40.0, [wait_ms])
    assert comm_exposed([_rank(0, steps), _rank(1, steps)]) is None


def test_a_program_without_distributed_has_no_comm_activity() -> None:
    steps = _steps(12, 1, 20.0, 40.0, [0.0])
    assert comm_activity(RankData(rank=0, steps=steps)) is None


def test_the_engine_reports_it_and_the_breakdown_shows_communication() -> None:
    steps = _steps(12, 4, 5.0, 10.0, [10.0] * 4)
    ranks = [_rank(0, steps), _rank(1, steps)]
    report = diagnose(make_run_analysis(ENV, ranks))
    assert report.findings[0].id.value == "comm.exposed"
    assert ranks[0].steps is not None and abs(ranks[0].steps.share("comm") - 40.0 / 103.0) < 1e-6


PROGRAM = textwrap.dedent(
    """
    import os, time, torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed import _functional_collectives as funcol
    dist.init_process_group("gloo", init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
    model = DistributedDataParallel(nn.Linear(64, 32))
    model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(6):
        model(torch.randn(8, 64)).sum().backward()
        opt.step()
        t = torch.ones(4)
        dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        (funcol.all_reduce(t, "sum", dist.group.WORLD) + 1).sum()  # (tensor parallelism's kind)
    dist.destroy_process_group()
    time.sleep(0.05)  # gloo frees the last collective with the GIL (see examples/ddp_straggler.py)
    print("ok", flush=True)
    """
)


def test_collectives_and_ddp_are_captured_from_a_real_program(tmp_path: Path) -> None:
    script = tmp_path / "ddp1.py"
    script.write_text(PROGRAM)
    out = tmp_path / "run"
    env = {"STORE": str(tmp_path / "store"), "PATH": "/usr/bin:/bin", "PINCHPOINT_NO_HISTORY": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pinchpoint", "run", "-q", "--opwindow", "off", "-o", str(out), str(script)],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
    lines = [json.loads(x) for x in (out / "ranks/rank0/distributed.jsonl").read_text().splitlines()]
    assert lines[0]["kind"] == "ddp" and lines[0]["backend"] == "gloo" and lines[0]["world_size"] == 1
    assert lines[0]["grad_bytes"] == (64 * 32 + 32) * 4 and lines[0]["devices"] == ["cpu"]
    assert lines[1] == {"t_ns": lines[1]["t_ns"], "kind": "comm_hook", "hook": "fp16_compress_hook"}
    steps = [json.loads(x) for x in (out / "ranks/rank0/steps.jsonl").read_text().splitlines()]
    # Each step after the first holds the two all_reduce calls and the Work.wait() (the first step
    # ends at the first optimizer step, before them).
    comm = [sum(1 for iv in s["intervals"] if iv[0] == "comm") for s in steps if not s["partial"]]
    assert comm[1:] and all(n >= 3 for n in comm[1:]), comm
    # each named as called, with the bytes it moved (4 floats); the async one's wait under its name
    named = {tuple(iv[3:]) for s in steps[1:] for iv in s["intervals"] if iv[0] == "comm" and len(iv) == 5}
    assert {("all_reduce", 16), ("all_reduce.wait", 16), ("functional.all_reduce", 16)} <= named, named
    report = json.loads((out / "report.json").read_text())
    assert report["ranks"][0]["rank"] == 0


def _fsdp_steps(n: int, regather_ms: float) -> tuple[Step, ...]:
    """FSDP-shaped steps: forward 10 ms holding a 6 ms all-gather, backward 20 ms holding a
    `regather_ms` all-gather and an 8 ms reduce-scatter (each wait nested in a blocking call, as gloo
    records it), then a 2 ms optimizer step."""
    out, t = [], 0
    for i in range(n):
        s, ivs = t, []
        gather = Interval(phase=Phase.COMM, start_ns=t, end_ns=t + 6 * MS, what="all_gather_single", nbytes=8 << 20)
        ivs += [Interval(phase=Phase.FORWARD, start_ns=t, end_ns=t + 10 * MS), gather,
                Interval(phase=Phase.COMM, start_ns=t + MS, end_ns=t + 6 * MS)]  # (its own Work.wait)
        t += 10 * MS
        bwd = round((20 + regather_ms) * MS)
        ivs.append(Interval(phase=Phase.BACKWARD, start_ns=t, end_ns=t + bwd))
        if regather_ms:
            ivs.append(Interval(phase=Phase.COMM, start_ns=t, end_ns=t + round(regather_ms * MS),
                                what="all_gather_single", nbytes=8 << 20))
        ivs.append(Interval(phase=Phase.COMM, start_ns=t + bwd - 8 * MS, end_ns=t + bwd,
                            what="reduce_scatter_single", nbytes=8 << 20))
        t += bwd
        ivs.append(Interval(phase=Phase.OPTIMIZER, start_ns=t, end_ns=t + 2 * MS))
        t += 2 * MS
        out.append(Step(index=i, kind=StepKind.TRAIN, start_ns=s, end_ns=t, intervals=tuple(ivs)))
    return tuple(out)  # fmt: skip


def test_fsdp_all_gathers_in_backward_are_priced_as_reshard_after_forward() -> None:
    steps = _fsdp_steps(12, 6.0)
    comm = comm_activity(RankData(rank=0, steps=steps))
    assert comm is not None
    # by collective and phase, the nested wait not counted twice
    assert comm.by_kind == pytest.approx(
        {("all_gather_single", "forward"): 6 * MS, ("all_gather_single", "backward"): 6 * MS,
         ("reduce_scatter_single", "backward"): 8 * MS}
    )  # fmt: skip
    assert comm.bytes_per_step[("all_gather_single", "backward")] == pytest.approx(8 << 20)
    f = comm_exposed([_rank(0, steps, ddp=None), _rank(1, steps, ddp=None)])
    assert f is not None and f.fix_kind is not None and f.fix_kind.value == "reshard"
    stated = facts(f)
    step = 10 + 26 + 2
    assert f.estimated_speedup == pytest.approx(step / (step - 6.0))
    assert stated["comm.exposed.regather"]["backward_ns"] == pytest.approx(6 * MS)
    assert "reshard_after_forward=False" in say(f.fix) and "reshard_after_forward=False" in say(f.snippet)
    kinds = stated["comm.exposed.kinds"]["kinds"]
    assert kinds[0][:2] == ("reduce_scatter_single", "backward")
    # kept gathered (no all-gather in backward): the generic advice, not this one
    f = comm_exposed([_rank(0, _fsdp_steps(12, 0.0), ddp=None), _rank(1, _fsdp_steps(12, 0.0), ddp=None)])
    assert f is not None and "comm.exposed.regather" not in facts(f)


def test_fsdp_settings_are_read_and_kept_gathered_modules_get_no_reshard_advice() -> None:
    from pinchpoint.ingest.parallel import fsdp_config
    from pinchpoint.trace.parallel import FsdpConfig

    lines = [{"kind": "ddp"}, {"kind": "fsdp", "modules": 5, "resharding": 9, "mesh": [2, "x", 0],
             "param_dtype": "bfloat16", "param_bytes": 64 << 20}, {"kind": "fsdp", "modules": "five"}]  # fmt: skip
    got = fsdp_config(lines)
    assert got == FsdpConfig(modules=5, resharding=5, mesh=(2,), param_dtype="bfloat16", param_bytes=64 << 20)
    assert fsdp_config([{"kind": "fsdp"}]) is None and fsdp_config([]) is None
    steps = _fsdp_steps(12, 6.0)
    kept = FsdpConfig(modules=5, resharding=0, mesh=(2,))

    def rank(i: int) -> RankAnalysis:
        return replace(make_rank_analysis(steps=steps, rank=i), comm=comm_activity(
            RankData(rank=i, steps=steps, fsdp=kept)), local_ranks=2)  # fmt: skip

    f = comm_exposed([rank(0), rank(1)])
    assert f is not None and "comm.exposed.regather" not in facts(f)  # (no module reshards: not this)
    said = say(facts(f)["comm.exposed.fsdp"])
    assert said.startswith("FSDP2 over a mesh of 2 ranks shards 5 module(s), 0 of them") and "64 MiB" not in said
