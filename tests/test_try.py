"""`pinchpoint try`: fixes planned from a report's findings, applied inside the program by the agent
(`capture/appliers.py`), and measured against a baseline (`pipeline/try_fix.py`)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch

from conftest import make_steps, report_doc
from pinchpoint.analysis.steps import steady_steps
from pinchpoint.capture import appliers
from pinchpoint.diagnosis.finding import FixKind
from pinchpoint.pipeline import fixes, try_fix
from pinchpoint.report.try_doc import TryDoc, try_schema
from pinchpoint.report.try_terminal import render_try
from pinchpoint.trace.trials import GLIBC_ENV

ROOT = Path(__file__).resolve().parent.parent


def _finding(fid: str, **kw: Any) -> dict[str, Any]:
    return {"id": fid, "share": 0.3, "estimated_speedup": 1.4, **kw}


REPORT = report_doc({
    "steps": {"median_ms": 50.0},
    "findings": [
        _finding("cpu.oversubscription", fix_kind="threads", fix_params={"threads": 2}),
        _finding("host.python", fix_kind="log_less", snippet="if step % 50 == 0: log(...)"),
        _finding("input.fetch", fix_kind="workers", fix_params={"num_workers": 2}),
        _finding("memory.pressure", fix_kind="allocator"),
        _finding("io.checkpoint", fix_kind="checkpoint_less", fix_params={"every": 500}),
        _finding("host.dispatch", fix_kind="compile"),
        _finding("compute.math", estimated_speedup=1.0),
    ],
})  # fmt: skip


def _first_by_id(plans: list[try_fix.Plan]) -> dict[str, try_fix.Plan]:
    out: dict[str, try_fix.Plan] = {}
    for p in plans:
        out.setdefault(p.id, p)
    return out


def test_each_finding_gets_its_applier_or_says_it_needs_code() -> None:
    plans = _first_by_id(try_fix.plans(REPORT))
    assert "compute.math" not in plans  # nothing to change
    threads = plans["cpu.oversubscription"]
    assert threads.cannot is None and threads.agent == {"threads": 2}
    assert threads.env["OMP_NUM_THREADS"] == "2"
    assert plans["input.fetch"].agent == {"loader": {"num_workers": 2, "persistent_workers": True}}
    assert plans["memory.pressure"].env == GLIBC_ENV
    assert plans["memory.pressure"].agent == {
        "malloc": {"mmap_threshold": 32 << 20, "trim_threshold": 1 << 30}
    }
    assert plans["io.checkpoint"].agent == {"checkpoint_every": 500}
    assert plans["host.dispatch"].agent == {"compile": True} and plans["host.dispatch"].cannot is None
    python = plans["host.python"]
    assert python.cannot is not None and python.snippet and not python.env and not python.agent


def test_an_allocator_finding_also_tries_jemalloc_and_tcmalloc_where_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinchpoint.pipeline import preload

    (tmp_path / "libtcmalloc_minimal.so.4").write_bytes(b"")
    monkeypatch.setattr(preload, "lib_dirs", lambda: [tmp_path])
    monkeypatch.setenv("LD_PRELOAD", "/opt/other.so")
    glibc, jemalloc, tcmalloc = (p for p in try_fix.plans(REPORT) if p.id == "memory.pressure")
    assert glibc.fix == "glibc thresholds" and glibc.cannot is None
    assert jemalloc.cannot is not None and "not installed" in jemalloc.cannot and "apt-get" in jemalloc.cannot
    assert tcmalloc.cannot is None
    assert tcmalloc.env == {"LD_PRELOAD": f"{tmp_path / 'libtcmalloc_minimal.so.4'}:/opt/other.so"}
    assert try_fix.slug(glibc) != try_fix.slug(tcmalloc)
    # two mallocs cannot stack: together takes the one that measured more
    tried = [
        try_fix.Tried(plan=glibc, speedup=1.2, significant=True),
        try_fix.Tried(plan=tcmalloc, speedup=1.3, significant=True),
        try_fix.Tried(plan=_first_by_id(try_fix.plans(REPORT))["input.fetch"], speedup=1.1, significant=True),
    ]
    together = try_fix.combined(tried)
    assert together is not None and together.fix == "tcmalloc preload + num_workers=2"
    assert together.env == tcmalloc.env


@pytest.mark.parametrize(
    ("kind", "agent"),
    [
        ("bf16_autocast", {"autocast": "bfloat16"}),
        ("fp32", {"autocast": "off"}),
        ("fused_optimizer", {"fused_optimizer": True}),
        ("tf32", {"tf32": True}),
        ("pin_memory", {"loader": {"pin_memory": True}}),
    ],
)
def test_precision_optimizer_and_cuda_fixes_are_applied_by_the_agent(
    kind: str, agent: dict[str, Any]
) -> None:
    (plan,) = try_fix.plans(report_doc({"findings": [_finding("compute.math", fix_kind=kind)]}))
    assert plan.cannot is None and plan.agent == agent and not plan.env and plan.predicted == 1.4


def test_select_top_all_and_by_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from pinchpoint.pipeline import preload

    monkeypatch.setattr(preload, "lib_dirs", lambda: [])  # neither jemalloc nor tcmalloc installed
    plans = try_fix.plans(REPORT)
    assert [p.id for p in try_fix.select(plans, "top")] == ["cpu.oversubscription"]
    assert len(try_fix.select(plans, "all")) == 8  # with the two preloads that cannot apply
    assert [p.id for p in try_fix.select(plans, "input")] == ["input.fetch"]
    memory = try_fix.select(plans, "memory.pressure")
    assert [p.fix for p in memory] == ["glibc thresholds", "jemalloc preload", "tcmalloc preload"]
    assert [p.cannot is None for p in memory] == [True, False, False]
    assert [p.fix for p in try_fix.select(plans, "memory.pressure:glibc")] == ["glibc thresholds"]
    assert try_fix.select(plans, "comm.exposed") == []


def test_the_fixes_that_paid_are_tried_together() -> None:
    plans = _first_by_id(try_fix.plans(REPORT))
    tried = [
        try_fix.Tried(plan=plans["cpu.oversubscription"], speedup=1.5, significant=True),
        try_fix.Tried(plan=plans["input.fetch"], speedup=1.2, significant=True),
        try_fix.Tried(plan=plans["memory.pressure"], speedup=1.01, significant=False),
        try_fix.Tried(plan=plans["host.python"]),
    ]
    together = try_fix.combined(tried)
    assert together is not None
    assert together.id == "cpu.oversubscription+input.fetch"
    # threads speed up the compute, workers take the fetch's wait away: the time each saved adds
    assert together.stacked and together.floor == 1.5
    assert together.predicted == pytest.approx(1 / (1 - (1 - 1 / 1.5) - (1 - 1 / 1.2)))
    assert together.stacked_how is not None and "added" in together.stacked_how
    # together below the best fix alone is in doubt, even near its prediction (CI read x1.26 against x1.30)
    below = try_fix.Tried(plan=together, speedup=1.45, interval=(1.4, 1.5), significant=True)
    assert try_fix.doubt(below) == "below"
    assert try_fix.doubt(replace(below, speedup=1.7, interval=(1.65, 1.75))) is None
    assert dict(together.agent) == {"threads": 2, "loader": {"num_workers": 2, "persistent_workers": True}}
    assert try_fix.combined(tried[1:]) is None  # one paid: nothing to stack


def test_the_table_reports_slower_fixes_failures_and_code_changes(tmp_path: Path) -> None:
    plans = _first_by_id(try_fix.plans(REPORT))
    tried = [
        try_fix.Tried(
            plan=plans["cpu.oversubscription"], speedup=1.52, interval=(1.4, 1.6), significant=True,
            next_limit="compute.math (70%)", steps=30,
        ),
        try_fix.Tried(plan=plans["input.fetch"], speedup=0.8, interval=(0.75, 0.85), significant=True),
        try_fix.Tried(plan=plans["memory.pressure"], error="the program exited with code 1 under this fix"),
        try_fix.Tried(plan=plans["host.python"]),
    ]  # fmt: skip
    doc = try_fix.try_doc(["python", "train.py"], tmp_path, 30, tried, 30)
    assert doc.schema == "pinchpoint.try/1"
    rows = {r["id"]: r for r in doc.to_dict()["tried"]}
    assert rows["cpu.oversubscription"]["applied"] and rows["cpu.oversubscription"]["speedup"] == 1.52
    assert rows["memory.pressure"]["applied"] is False and "exited" in rows["memory.pressure"]["error"]
    assert rows["host.python"]["cannot"] and rows["host.python"]["snippet"]
    jsonschema.Draft202012Validator(try_schema()).validate(json.loads(json.dumps(doc.to_dict())))
    assert TryDoc.from_dict(doc.to_dict()) == doc
    out = io.StringIO()
    render_try(doc, REPORT, out)
    text = out.getvalue()
    assert "×1.52 [1.40-1.60]" in text and "compute.math (70%)" in text
    assert "×0.80 [0.75-0.85] slower" in text
    assert "failed" in text and "not applied" in text and "if step % 50 == 0" in text


def test_runs_that_end_short_of_the_steps_and_stacked_fixes_are_said(tmp_path: Path) -> None:
    plans = _first_by_id(try_fix.plans(REPORT))
    fetch, threads = plans["input.fetch"], plans["cpu.oversubscription"]
    short = try_fix.Tried(plan=fetch, speedup=1.3, interval=(1.2, 1.4), significant=True, steps=12)
    ok = try_fix.Tried(plan=threads, speedup=1.5, interval=(1.4, 1.6), significant=True, steps=30)
    together = try_fix.combined([short, ok])
    assert together is not None
    both = try_fix.Tried(plan=together, speedup=2.4, interval=(2.2, 2.6), significant=True, steps=30)
    doc = try_fix.try_doc(["python", "train.py"], tmp_path, 30, [short, ok, both], 18)
    out = io.StringIO()
    render_try(doc, REPORT, out)
    text = out.getvalue()
    assert "the baseline ended after 18 steady steps of the 30 asked" in text
    assert "it ended after 12 steady steps of the 30 asked" in text
    assert "predicted ×2.29 from the time each saved alone, added" in text
    assert "together gave about that" in text


def test_fixes_of_different_parts_of_the_step_add_what_they_saved() -> None:
    # stacked_fixes.py on the avx512_bf16 EPYC: x1.64 and x1.34 alone, x2.78 together (examples/TRUTH.md)
    gain, how = try_fix.stacked_gain([("input.fetch", 1.64), ("io.checkpoint", 1.34)])
    assert gain == pytest.approx(2.81, abs=0.01) and "added" in how
    # two fixes of the compute speed up the same work
    gain, how = try_fix.stacked_gain([("cpu.oversubscription", 1.5), ("memory.pressure", 1.2)])
    assert gain == pytest.approx(1.8) and "multiplied" in how
    # mixed: the compute's fixes multiply, then that part's saving adds to the fetch's
    gain, how = try_fix.stacked_gain(
        [("cpu.oversubscription", 1.5), ("memory.pressure", 1.2), ("input.fetch", 1.25)]
    )
    assert gain == pytest.approx(1 / (1 - (1 - 1 / 1.8) - 0.2)) and "within one part" in how
    # savings that add up to nearly the whole step cannot all be separate: multiplied
    gain, how = try_fix.stacked_gain([("input.fetch", 4.0), ("io.checkpoint", 4.0)])
    assert gain == pytest.approx(16.0) and "nearly the whole step" in how


def _steps(ms: float, n: int = 30) -> tuple[int, ...]:
    return tuple(int((ms + (i % 5) * 0.5) * 1e6) for i in range(n))


def test_a_pair_in_doubt_runs_again_as_abba_and_pools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pinchpoint.compare.diff import RunSide
    from pinchpoint.pipeline import resolve

    step_ms = {"baseline": 100.0, "threads=2": 125.0, "threads=2-again": 66.0, "baseline-again": 100.0}
    step_ms |= {"num_workers=2": 80.0}
    ran: list[str] = []

    def runner(run_dir: Path, env: Any, agent: Any) -> tuple[int, Any, str | None]:
        ran.append(run_dir.name)
        return 0, report_doc({"findings": []}), None

    def load_side(ref: str) -> RunSide:
        return RunSide(
            label=ref, report=report_doc({"findings": []}), step_ns=_steps(step_ms[Path(ref).name])
        )

    monkeypatch.setattr(resolve, "load_side", load_side)
    plans = _first_by_id(try_fix.plans(REPORT))  # both predicted x1.4
    again = try_fix.SecondBaseline(tmp_path / "baseline-again", 30, runner)
    base = tmp_path / "baseline"
    slow = try_fix.run_plan(plans["cpu.oversubscription"], tmp_path / "threads=2", base, 30, runner, again)
    assert ran == ["threads=2", "threads=2-again", "baseline-again"]  # A B B A
    assert slow.pairs == 2 and slow.speedup is not None and 0.95 < slow.speedup < 1.05  # 100 / mean(125, 66)
    fine = try_fix.run_plan(plans["input.fetch"], tmp_path / "num_workers=2", base, 30, runner, again)
    assert ran[3:] == ["num_workers=2"] and fine.pairs == 1  # x1.25 against x1.4: no doubt
    assert fine.speedup is not None and abs(fine.speedup - 1.25) < 0.02
    assert try_fix.try_doc(["p"], base, 30, [slow, fine], 30).tried[0].pairs == 2


def test_a_long_tight_pair_far_from_the_prediction_is_not_run_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pinchpoint.compare.diff import RunSide
    from pinchpoint.pipeline import resolve

    step_ms = {"baseline": 100.0, "threads=2": 25.0}  # x4 against x1.4 predicted, tight
    ran: list[str] = []
    clock = [0.0]

    def runner(run_dir: Path, env: Any, agent: Any) -> tuple[int, Any, str | None]:
        ran.append(run_dir.name)
        clock[0] += 200.0  # each run takes 200 s
        return 0, report_doc({"findings": [], "history_id": 7}), None

    def load_side(ref: str) -> RunSide:
        return RunSide(
            label=ref, report=report_doc({"findings": []}), step_ns=_steps(step_ms[Path(ref).name])
        )

    monkeypatch.setattr(resolve, "load_side", load_side)
    monkeypatch.setattr(try_fix.time, "monotonic", lambda: clock[0])
    plan = _first_by_id(try_fix.plans(REPORT))["cpu.oversubscription"]
    again = try_fix.SecondBaseline(tmp_path / "baseline-again", 30, runner)
    got = try_fix.run_plan(plan, tmp_path / "threads=2", tmp_path / "baseline", 30, runner, again)
    assert ran == ["threads=2"] and got.pairs == 1 and got.not_again and "~400 s" in got.not_again
    doc = try_fix.try_doc(["p"], tmp_path / "baseline", 30, [got], 30, baseline_id=6)
    assert doc.tried[0].history_id == 7
    out = io.StringIO()
    render_try(doc, REPORT, out)
    assert "did not run again" in out.getvalue() and "`pinchpoint diff #6 #7`" in out.getvalue()
    clock[0], ran[:] = 0.0, []
    monkeypatch.setattr(try_fix, "AGAIN_BUDGET_S", 1000.0)  # a short pair runs again
    step_ms |= {"threads=2-again": 25.0, "baseline-again": 100.0}
    got = try_fix.run_plan(plan, tmp_path / "threads=2", tmp_path / "baseline", 30, runner, again)
    assert ran == ["threads=2", "threads=2-again", "baseline-again"] and got.pairs == 2


def test_doubt() -> None:
    plan = try_fix.plans(REPORT)[0]  # predicted x1.4
    sure = try_fix.Tried(plan=plan, speedup=1.45, interval=(1.4, 1.5), significant=True)
    assert not try_fix.doubtful(sure)
    assert try_fix.doubtful(try_fix.Tried(plan=plan, speedup=1.45, interval=(1.4, 1.5), significant=False))
    assert try_fix.doubtful(try_fix.Tried(plan=plan, speedup=1.45, interval=(1.1, 1.9), significant=True))
    assert try_fix.doubtful(try_fix.Tried(plan=plan, speedup=0.8, interval=(0.78, 0.82), significant=True))
    assert not try_fix.doubtful(try_fix.Tried(plan=plan, error="exited"))


def test_stop_after_counts_steady_steps_only() -> None:
    a = appliers.Applier({"stop_after": 3})
    for index in range(appliers.WARMUP_STEPS):
        a.step_written(index, steady=True)  # warm-up: not counted
    a.step_written(2, steady=False)  # the op window's
    a.step_written(3, steady=True)
    a.step_written(4, steady=True)
    with pytest.raises(SystemExit) as exc:
        a.step_written(5, steady=True)
    assert exc.value.code == 0
    appliers.Applier({}).step_written(10, steady=True)  # no budget: never stops


def test_the_tried_thread_count_holds_against_the_programs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    before, original = torch.get_num_threads(), torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", original)  # the wrapper goes after the test
    try:
        appliers.Applier({"threads": 1}).apply(torch)
        torch.set_num_threads(16)  # the program's hard-coded count
        assert torch.get_num_threads() == 1
    finally:
        original(before)


def test_loader_arguments_override_the_programs(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils.data import DataLoader

    original = DataLoader.__init__
    monkeypatch.setattr(DataLoader, "__init__", original)  # restored after the test
    appliers.Applier({"loader": {"num_workers": 2, "persistent_workers": True}}).apply(torch)
    data = list(range(8))
    positional = DataLoader(data, 4, False, None, None, 0)  # num_workers=0 by position
    assert positional.num_workers == 2 and positional.persistent_workers
    DataLoader.__init__ = original  # type: ignore[method-assign]
    appliers.Applier({"loader": {"num_workers": 0}}).apply(torch)
    keyword = DataLoader(data, batch_size=4, num_workers=3, persistent_workers=True, prefetch_factor=4)
    assert keyword.num_workers == 0 and not keyword.persistent_workers and keyword.prefetch_factor is None
    with pytest.raises(TypeError):
        DataLoader(data, no_such_argument=1)  # the program's own mistake stays its own


def test_checkpoints_are_written_every_nth_save_outside_the_agents_hook(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch, "save", torch.save)  # restored after the test
    appliers.Applier({"checkpoint_every": 3}).apply(torch)
    for i in range(7):
        torch.save({"i": i}, tmp_path / f"ckpt{i}.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt0.pt", "ckpt3.pt", "ckpt6.pt"]


def test_top_level_modules_with_parameters_run_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.nn.Module, "__call__", torch.nn.Module.__call__)  # restored after
    compiled: list[Any] = []
    real_compile = torch.compile

    def spy(module: Any, *a: Any, **kw: Any) -> Any:
        compiled.append(module)
        return real_compile(module, *a, **kw)

    monkeypatch.setattr(torch, "compile", spy)
    appliers.Applier({"compile": True}).apply(torch)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    loss_fn = torch.nn.MSELoss()
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    want = torch.nn.functional.mse_loss(
        torch.nn.functional.linear(
            torch.relu(torch.nn.functional.linear(x, model[0].weight, model[0].bias)),
            model[2].weight,
            model[2].bias,
        ),
        y,
    )
    for _ in range(2):
        loss = loss_fn(model(x), y)
    loss.backward()
    assert compiled == [model]  # once, the model only: not its layers, not the loss
    assert torch.allclose(loss, want, atol=1e-6) and model[0].weight.grad is not None


def test_an_accumulating_ddp_loop_all_reduces_once_per_optimizer_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    monkeypatch.setattr(DDP, "forward", DDP.forward)  # restored after
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        handle = appliers._no_sync_accumulation(torch, 4)
        inner = torch.nn.Linear(4, 1)
        synced: list[bool] = []
        model = DDP(inner)
        inner.register_forward_pre_hook(lambda _m, _a: synced.append(model.require_backward_grad_sync))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):  # two optimizer steps of four micro-batches
            for _ in range(4):
                model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            model(torch.randn(2, 4))  # evaluation: not counted, nothing to sync
        handle.remove()
    finally:
        dist.destroy_process_group()
    assert synced == [False, False, False, True] * 2 + [True]


def test_no_sync_is_applied_only_where_the_loop_already_accumulates() -> None:
    finding = _finding("comm.exposed", fix_kind="no_sync", snippet="with model.no_sync(): ...")
    (plan,) = try_fix.plans(
        report_doc({"findings": [{**finding, "fix_params": {"micro_batches": 4, "accumulating": 1}}]})
    )
    assert plan.cannot is None and plan.agent == {"no_sync": 4} and "no_sync" in plan.applied_how
    (plan,) = try_fix.plans(
        report_doc({"findings": [{**finding, "fix_params": {"micro_batches": 2, "accumulating": 0}}]})
    )
    assert plan.cannot is not None and plan.snippet


def test_bf16_autocast_runs_the_model_not_the_loss_and_hands_back_fp32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.nn.Module, "__call__", torch.nn.Module.__call__)  # restored after
    seen: list[torch.dtype] = []
    appliers.Applier({"autocast": "bfloat16"}).apply(torch)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    model[1].register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    out = model(torch.randn(4, 8))
    loss = torch.nn.functional.cross_entropy(out, torch.tensor([0, 1, 0, 1]))
    loss.backward()
    assert seen == [torch.bfloat16]  # the matmuls ran in bf16
    assert out.dtype == torch.float32 and loss.dtype == torch.float32  # the loss as before
    assert model[0].weight.dtype == torch.float32 and model[0].weight.grad is not None


def test_autocast_off_disables_the_programs_own_regions(monkeypatch: pytest.MonkeyPatch) -> None:
    cls = torch.amp.autocast_mode.autocast
    monkeypatch.setattr(cls, "__init__", cls.__init__)  # restored after
    appliers.Applier({"autocast": "off"}).apply(torch)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.float32
    with torch.autocast("cpu", torch.bfloat16, True):  # enabled given by position
        assert (a @ b).dtype == torch.float32
    with torch.amp.autocast("cpu", dtype=torch.bfloat16, enabled=True):
        assert (a @ b).dtype == torch.float32


def test_optimizers_are_built_fused_unless_the_program_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in appliers.FUSED_OPTIMIZERS:
        cls = getattr(torch.optim, name)
        monkeypatch.setattr(cls, "__init__", cls.__init__)  # restored after
    appliers.Applier({"fused_optimizer": True}).apply(torch)
    p = torch.nn.Parameter(torch.randn(4))
    assert torch.optim.AdamW([p], lr=1e-3).defaults["fused"] is True
    assert torch.optim.SGD(params=[p], lr=0.1).defaults["fused"] is True
    own = torch.optim.Adam([p], lr=1e-3, foreach=False)
    assert own.defaults["foreach"] is False and not own.defaults["fused"]
    p.grad = torch.ones(4)
    before = p.detach().clone()
    torch.optim.AdamW([p], lr=0.1).step()
    assert not torch.equal(before, p.detach())


def test_a_requested_spec_that_does_not_parse_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(appliers.TRY_ENV, "{not json")
    assert appliers.requested() == {}
    monkeypatch.setenv(appliers.TRY_ENV, json.dumps({"stop_after": 5}))
    assert appliers.requested() == {"stop_after": 5}


def _pinchpoint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PINCHPOINT_RUN_DIR"}
    return subprocess.run(
        [sys.executable, "-m", "pinchpoint", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
        env=env,
    )  # fmt: skip


def test_a_command_that_fails_gets_one_line_and_its_exit_code(tmp_path: Path) -> None:
    res = _pinchpoint("try", "-o", "runs", "--", sys.executable, "-c", "raise SystemExit(3)", cwd=tmp_path)
    assert res.returncode == 3
    assert "Traceback" not in res.stderr
    assert "baseline run failed" in res.stderr.strip().splitlines()[-1]


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    res = _pinchpoint("try", cwd=tmp_path)
    assert res.returncode != 0 and "nothing to try" in res.stderr and "Traceback" not in res.stderr
    res = _pinchpoint("try", "--steps", "1", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert res.returncode != 0 and "--steps" in res.stderr and "Traceback" not in res.stderr


def test_files_a_run_writes_under_the_working_directory_are_found(tmp_path: Path) -> None:
    from pinchpoint.pipeline.written import snapshot, written

    (tmp_path / "data.txt").write_text("input")
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / ".git").mkdir()
    before = snapshot(tmp_path, skip=(runs,))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.pt").write_bytes(b"x")
    (tmp_path / "data.txt").write_text("changed by the program")
    (runs / "steps.jsonl").write_text("{}")  # pinchpoint's own
    (tmp_path / ".git" / "index").write_text("")
    assert written(before, snapshot(tmp_path, skip=(runs,))) == ["ckpt/model.pt", "data.txt"]
    assert written(None, {}) is None


PROGRAM = """
import os, pathlib
tag = os.environ["TAG"]
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/ckpt.txt").write_text(tag)
with open("log.txt", "a") as f:
    f.write(tag + " " + pathlib.Path("data.txt").read_text() + "\\n")
if tag == "trial":
    pathlib.Path("cache/leak.txt").write_text(tag)
"""


def test_trials_write_into_scratch_copies_not_over_the_users_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinchpoint.cli.try_cmd import _Runs

    (tmp_path / "data.txt").write_text("input")
    (tmp_path / "cache").mkdir()
    (tmp_path / "train.py").write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PINCHPOINT_RUN_DIR", raising=False)
    runs = _Runs([sys.executable, "train.py"], tmp_path / "runs", tmp_path / "runs" / "baseline")
    runs(tmp_path / "runs" / "baseline", {"TAG": "baseline"}, {})
    runs(tmp_path / "runs" / "trial", {"TAG": "trial"}, {})
    scratch = tmp_path / "runs" / "scratch" / "trial"
    assert (tmp_path / "out" / "ckpt.txt").read_text() == "baseline"
    assert (tmp_path / "log.txt").read_text() == "baseline input\n"
    assert (scratch / "out" / "ckpt.txt").read_text() == "trial"
    # the trial resumed from the baseline's state: its log has both lines, in the copy only
    assert (scratch / "log.txt").read_text() == "baseline input\ntrial input\n"
    assert (scratch / "data.txt").is_symlink() and not (scratch / "log.txt").is_symlink()
    got = runs.cwd_writes()
    doc = try_fix.try_doc(["python", "train.py"], tmp_path / "runs" / "baseline", 30, [], 30, cwd_writes=got)
    assert got.files == ("log.txt", "out/ckpt.txt") and got.scratch and not got.reused
    # a directory the baseline never wrote stays a link: the trial's write there reached the user's
    assert got.leaked == ("cache/leak.txt",)
    out = io.StringIO()
    render_try(doc, report_doc({"steps": {"median_ms": 50.0}, "findings": []}), out)
    text = out.getvalue()
    assert "wrote 2 file(s) under the working directory" in text and "scratch copies" in text
    assert "still wrote 1 file(s)" in text and "cache/leak.txt" in text


def test_without_a_fresh_baseline_the_trials_run_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pinchpoint.cli.try_cmd import _Runs

    (tmp_path / "data.txt").write_text("input")
    (tmp_path / "train.py").write_text(PROGRAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PINCHPOINT_RUN_DIR", raising=False)
    runs = _Runs([sys.executable, "train.py"], tmp_path / "runs", tmp_path / "recorded")
    runs(tmp_path / "runs" / "trial", {"TAG": "again"}, {})
    assert (tmp_path / "out" / "ckpt.txt").read_text() == "again"
    got = runs.cwd_writes()
    assert got.reused and not got.scratch and got.count == 2
    doc = try_fix.try_doc(["python", "train.py"], tmp_path / "recorded", 30, [], 30, cwd_writes=got)
    out = io.StringIO()
    render_try(doc, report_doc({"steps": {"median_ms": 50.0}, "findings": []}), out)
    assert "no scratch copy: the baseline was recorded earlier" in out.getvalue()


def test_the_collectors_fix_is_tried_both_ways_by_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """host.gc (gc_less): explicit collections made young, and start-up frozen after the first step;
    each a plan of its own, applied inside the program."""
    import gc

    finding = {"id": "host.gc", "fix_kind": "gc_less", "fix_params": {"line": 12}, "estimated_speedup": 3.7}
    plans = try_fix.plans(report_doc({"findings": [finding]}))
    assert [p.agent for p in plans] == [{"gc": {"collect": "young"}}, {"gc": {"freeze": True}}]
    assert all(p.cannot is None for p in plans)
    calls: list[int] = []
    monkeypatch.setattr(gc, "collect", lambda generation=2: calls.append(generation) or 0)
    appliers.Applier({"gc": {"collect": "young"}}).apply(torch)
    gc.collect()
    assert calls == [0]
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    appliers.Applier({"gc": {"freeze": True}}).step_written(0, steady=False)
    assert frozen == [True]


def test_a_trial_measures_after_the_prefetched_batches_are_drained() -> None:
    """8 workers × 4 prefetched: the first 32 training steps of a `try` run consume batches loaded while
    the program started (a loader fix read ×29 over 28 such steps, ×8.4 over the run): they are marked
    settling, not counted towards the budget, and left out of the steady steps."""
    a = appliers.Applier({"stop_after": 3})
    a.loader_seen({"num_workers": 8, "prefetch_factor": 4})
    a.loader_seen({"num_workers": 2, "prefetch_factor": 2})  # (only the first loader with workers)
    marks = [a.settling({"kind": "train"}) for _ in range(34)]
    assert marks == [True] * 32 + [False] * 2
    assert not a.settling({"kind": "eval"})
    b = appliers.Applier({})
    b.loader_seen({"num_workers": 0, "prefetch_factor": None})  # in-process loading: nothing in flight
    b.loader_seen({"num_workers": 3, "prefetch_factor": None})  # torch's default: 2 a worker
    assert sum(b.settling({"kind": "train"}) for _ in range(10)) == 6
    steps = make_steps(12, {"forward": 10})
    steps = tuple(replace(s, settling=s.index < 6) for s in steps)
    assert [s.index for s in steady_steps(steps)] == list(range(6, 12))


def test_a_trial_that_never_drained_its_prefetch_says_so(tmp_path: Path) -> None:
    from test_rundir_ingest import write_jsonl, write_minimal_run_dir

    run = write_minimal_run_dir(tmp_path / "run", n_steps=10)
    steps_file = run / "ranks" / "rank0" / "steps.jsonl"
    rows = [json.loads(line) for line in steps_file.read_text().splitlines()]
    assert try_fix._still_draining(run) is None  # (nothing settling)
    write_jsonl(steps_file, [{**r, "settling": r["step"] < 6} for r in rows])
    assert try_fix._still_draining(run) is None  # four steady steps after the drain
    write_jsonl(steps_file, [{**r, "settling": True} for r in rows])
    why = try_fix._still_draining(run)
    assert why is not None and "10 batches" in why and "steady state" in why


def test_one_fix_table_every_kind_and_every_applier() -> None:
    """Every kind of fix a finding can name has one entry in `pipeline/fixes.py` (ways to apply it, or
    why it cannot), and what those ways ask the agent is exactly what `capture/appliers.py` applies."""
    from pinchpoint.capture.appliers import SPEC_KEYS
    from pinchpoint.diagnosis.finding import FixKind

    assert set(fixes.FIXES) == set(FixKind)
    params = {
        "threads": 2,
        "num_workers": 2,
        "every": 10,
        "micro_batches": 4,
        "accumulating": 1,
        "microbatches": 4,
    }
    asked: set[str] = set()
    for kind, fix in fixes.FIXES.items():
        ways = fix.ways(params) if fix.ways is not None else ()
        assert ways or fix.cannot, kind
        for way in ways:
            assert way.fix and way.how, kind
            asked |= set(way.agent)
    assert asked == set(SPEC_KEYS) - {"stop_after"}  # (stop_after: the step budget, every run's)
    assert fixes.ways_of("no_such_kind", {}) == ((), fixes.CODE)
    assert fixes.ways_of("threads", {})[0] == ()  # its parameter missing: nothing to apply


def test_the_microbatch_fix_rebinds_the_schedules_argument_however_it_was_passed() -> None:
    """pipeline.bubble's fix: each pipelining schedule is built with the tried n_microbatches, whether the
    program passed it by position or by name; a call the constructor refuses is the program's error."""
    from pinchpoint.capture.appliers import _rebound

    class Schedule:
        def __init__(self, stage: object, n_microbatches: int, loss_fn: object = None) -> None:
            self.n = n_microbatches

    init = _rebound(Schedule.__init__, lambda arguments: arguments.update(n_microbatches=4))
    for args, kw in (
        ((None, 1), {}),
        ((None,), {"n_microbatches": 1}),
        ((), {"stage": None, "n_microbatches": 2}),
    ):
        s = Schedule.__new__(Schedule)
        init(s, *args, **kw)
        assert s.n == 4
    with pytest.raises(TypeError):
        init(Schedule.__new__(Schedule), None, 1, None, "extra")


def test_the_fsdp_fix_keeps_each_sharded_modules_parameters_gathered() -> None:
    """comm.exposed's reshard fix: the agent calls each FSDP2 module's own setter once step 1 ran
    (`dist_hooks.note_fsdp`); a run not asked for it leaves them as they are."""
    from pinchpoint.capture.appliers import Applier

    class Sharded:
        def __init__(self) -> None:
            self.calls: list[tuple[bool, bool]] = []

        def set_reshard_after_forward(self, value: bool, recurse: bool = True) -> None:
            self.calls.append((value, recurse))

    (plan,) = try_fix.plans(report_doc({"findings": [_finding("comm.exposed", fix_kind="reshard")]}))
    assert plan.cannot is None and plan.agent == {"fsdp_reshard": False}
    modules = [Sharded(), Sharded()]
    Applier(dict(plan.agent)).sharded(modules)  # type: ignore[arg-type]
    assert [m.calls for m in modules] == [[(False, False)], [(False, False)]]
    untouched = Sharded()
    Applier({"threads": 2}).sharded([untouched])
    assert untouched.calls == []


def test_the_dynamic_fix_unpins_static_compiles_and_leaves_others_as_they_were() -> None:
    """compile.recompiles' fix without code: `torch.compile(..., dynamic=False)` compiles with
    dynamic=None; an explicit dynamic=True and a call without it are untouched."""
    from types import SimpleNamespace

    from pinchpoint.capture.appliers import Applier

    seen: list[dict[str, object]] = []
    fake = SimpleNamespace(compile=lambda *args, **kwargs: seen.append(kwargs) or "compiled")
    Applier({"dynamic": True}).apply(fake)
    assert fake.compile("model", dynamic=False) == "compiled"
    fake.compile("model", dynamic=True)
    fake.compile("model", mode="max-autotune")
    assert seen == [{"dynamic": None}, {"dynamic": True}, {"mode": "max-autotune"}]
    (way,) = fixes.FIXES[FixKind.DYNAMIC_SHAPES].ways({})  # type: ignore[misc]
    assert way.whole_run and way.agent == {"dynamic": True}


def _timed(loop_s: float) -> Any:
    """A report whose run spent `loop_s` compiling and stepping, beside start-up, shutdown and pinchpoint's
    own work (left out of what is compared)."""
    from types import SimpleNamespace

    segments = [("start-up", 4.0), ("compiling", loop_s - 1), ("training steps", 1.0), ("shutdown", 2.0)]
    return SimpleNamespace(
        run_time=SimpleNamespace(segments=[SimpleNamespace(name=n, s=v) for n, v in segments]),
        findings=[SimpleNamespace(id="compute.math", share=0.8)],
    )


def test_a_whole_run_fix_is_timed_on_full_runs_in_a_b_b_a_order(tmp_path: Path) -> None:
    """Baseline and trial each to the program's end, twice (B T T B), their loops compared (the wall clock
    less start-up, shutdown and pinchpoint's own work): the ratio of the sums, the interval from the
    extremes."""
    from pinchpoint.pipeline.try_whole import FullBaselines, run_plan

    order: list[tuple[str, object]] = []
    walls = {"baseline-whole-1": 40.0, "baseline-whole-2": 44.0, "fix": 20.0, "fix-again": 22.0}

    def runner(run_dir: Path, env: Mapping[str, str], agent: Mapping[str, object]) -> Any:
        order.append((run_dir.name, agent.get("stop_after")))
        return 0, _timed(walls[run_dir.name]), None

    plan = try_fix.Plan(id="compile.recompiles", fix="dynamic=None", applied_how="-", agent={"dynamic": True},
                        predicted=2.0, whole_run=True)  # fmt: skip
    whole = FullBaselines(tmp_path, runner)
    t = run_plan(plan, tmp_path / "fix", tmp_path / "baseline", 30, runner, None, whole)
    assert [name for name, _ in order] == ["baseline-whole-1", "fix", "fix-again", "baseline-whole-2"]
    assert all(stop is None for _, stop in order)  # no step budget: each runs to its end
    assert t.speedup == pytest.approx((40 + 44) / (20 + 22)) and t.whole_run and t.pairs == 2
    assert t.interval == pytest.approx((40 / 22, 44 / 20)) and t.significant
    assert t.next_limit == "compute.math (80%)"
    row = try_fix.try_doc(["python", "x.py"], tmp_path / "baseline", 30, [t], 30).tried[0]
    assert row.whole_run is True and row.steps == 0
    # the baselines are shared: a second whole-run plan runs only its own trials
    order.clear()
    run_plan(plan, tmp_path / "fix", tmp_path / "baseline", 30, runner, None, whole)
    assert [name for name, _ in order] == ["fix", "fix-again"]
    # a trial whose program fails is said, not measured
    failing = run_plan(plan, tmp_path / "fix", tmp_path / "baseline", 30,
                               lambda d, e, a: (1, None, "boom"), None, whole)  # fmt: skip
    assert failing.speedup is None and failing.error == "boom"
