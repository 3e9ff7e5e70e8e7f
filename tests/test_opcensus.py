"""The CPU op window's recorder: a TorchDispatchMode census written in the Chrome-trace form the
op-window reader reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinchpoint.capture import opcensus
from pinchpoint.ingest.opwindow import read_opwindow

torch = pytest.importorskip("torch")


def _train_step(model: object, opt: object, x: object) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).square().mean()  # type: ignore[operator]
    loss.backward()
    opt.step()  # type: ignore[attr-defined]


def test_census_sees_forward_backward_and_optimizer_ops_with_their_dtypes(tmp_path: Path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64)
    census = opcensus.Census(torch)
    census.start()
    _train_step(model, opt, x)
    events = census.stop()
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    assert _get_current_dispatch_mode() is None  # nothing left behind
    names = [e[0] for e in events]
    assert "aten::addmm" in names or "aten::mm" in names
    assert "aten::gelu_backward" in names  # backward's ops are seen
    mm = [e for e in events if e[0] in ("aten::addmm", "aten::mm")]
    assert any("c10::BFloat16" in e[4] for e in mm)  # autocast's bf16, as Kineto names it
    assert opcensus.heaviest_matmul(events) in {
        (32, 64, 128),
        (32, 128, 8),
        (32, 8, 128),
        (8, 32, 128),
        (128, 32, 64),
        (64, 32, 128),
    }

    path = tmp_path / "opwindow.json"
    opcensus.write_trace(path, events)
    window = read_opwindow(path, 1)
    assert len(window.ops) == len(events)
    assert all(o.depth == 0 for o in window.ops)
    first = window.ops[0]
    assert first.start_ns == pytest.approx(min(e[1] for e in events), abs=1)  # monotonic ns kept
    flops = [o.flops for o in window.ops if o.name in ("aten::addmm", "aten::mm") and o.flops]
    assert flops and all(f > 0 for f in flops)


def test_census_records_nothing_after_stop() -> None:
    census = opcensus.Census(torch)
    census.start()
    torch.ones(3).add(1)
    n = len(census.stop())
    torch.ones(3).add(1)
    assert len(census.stop()) == n > 0


def test_census_keeps_no_tensor_alive() -> None:
    """It records dtypes and shapes, never the tensors (a window over an optimizer's foreach ops
    would otherwise hold every gradient until it ends)."""
    import gc
    import weakref

    census = opcensus.Census(torch)
    census.start()
    a, b = torch.ones(64), torch.ones(64)
    torch.cat([a, b]).add_(1)
    refs = [weakref.ref(a), weakref.ref(b)]
    del a, b
    gc.collect()
    assert all(r() is None for r in refs)
    events = census.stop()
    cat = next(e for e in events if e[0] == "aten::cat")
    assert cat[4][0] == "TensorList"
    add = next(e for e in events if e[0] == "aten::add_")
    assert add[4] == ["float", "Scalar"] and add[5] == [[128], []]
