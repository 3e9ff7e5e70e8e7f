"""Memory traffic of the op window: elementwise time, bytes and the fusion chains."""

from __future__ import annotations

from pathlib import Path

from pinchpoint.analysis.roofline import memory_traffic, op_bytes
from pinchpoint.trace.run import OpEvent, OpWindow

BIG = (32, 512, 256)  # 4 Mi elements
F32 = "float"


def _op(
    name: str, start: int, dur: int, dims: list[tuple[int, ...]], types: list[str] | None = None
) -> OpEvent:
    return OpEvent(
        name=name, start_ns=start, dur_ns=dur, tid=1, depth=0,
        input_types=tuple(types or [F32 if d else "Scalar" for d in dims]), input_dims=tuple(dims),
    )  # fmt: skip


def _gelu_step(t0: int) -> list[OpEvent]:
    """One step's forward of a written-out GELU between two matmuls (the shape of compute_memory.py)."""
    ops = [_op("aten::addmm", t0, 500_000, [(256,), (16384, 64), (64, 256)])]
    t = t0 + 500_000
    for name, dims in (
        ("aten::mul", [BIG, ()]), ("aten::mul", [BIG, BIG]), ("aten::mul", [BIG, BIG]), ("aten::mul", [BIG, ()]),
        ("aten::add", [BIG, BIG, ()]), ("aten::mul", [BIG, ()]), ("aten::tanh", [BIG]), ("aten::add", [BIG, ()]),
        ("aten::mul", [BIG, BIG]),
    ):  # fmt: skip
        dur = 3_000_000 if name == "aten::tanh" else 1_000_000
        ops.append(_op(name, t, dur, dims))
        t += dur
    ops.append(_op("aten::add", t, 5_000, [(4, 4), (4, 4)]))  # small: not memory work
    ops.append(_op("aten::addmm", t + 10_000, 500_000, [(64,), (16384, 256), (256, 64)]))
    return ops


def test_op_bytes_reads_inputs_and_writes_the_broadcast_output() -> None:
    n = 32 * 512 * 256
    assert op_bytes(_op("aten::mul", 0, 1, [BIG, ()])) == 2 * n * 4
    assert op_bytes(_op("aten::add", 0, 1, [BIG, BIG, ()])) == 3 * n * 4
    assert op_bytes(_op("aten::add", 0, 1, [BIG, (256,)])) == 2 * n * 4 + 256 * 4
    assert op_bytes(_op("aten::mul", 0, 1, [BIG, ()], ["c10::BFloat16", "Scalar"])) == 2 * n * 2


def test_a_written_out_activation_is_one_chain_and_fusing_it_keeps_its_slowest_op() -> None:
    ops = _gelu_step(0) + _gelu_step(50_000_000)
    t = memory_traffic(OpWindow(steps=2, start_ns=0, end_ns=100_000_000, ops=tuple(ops)))
    assert t is not None
    assert t.elementwise_ops_per_step == 9
    assert t.elementwise_ns_per_step == 11_000_000
    assert len(t.chains) == 1  # the same chain in both steps, merged
    c = t.chains[0]
    assert c.ops == ("mul", "mul", "mul", "mul", "add", "mul", "tanh", "add", "mul")
    assert c.shape == BIG and c.dtype == F32
    assert c.ns_per_step == 11_000_000 and c.fused_ns_per_step == 3_000_000
    assert t.fusion_saving_ns_per_step == 8_000_000
    n = 32 * 512 * 256
    assert t.bytes_per_step == n * 4 * (2 + 3 + 3 + 2 + 3 + 2 + 2 + 2 + 3)


def test_ops_on_other_tensors_or_small_ones_break_a_chain() -> None:
    other = (32, 512, 64)
    ops = [
        _op("aten::mul", 0, 10, [BIG, ()]), _op("aten::add", 10, 10, [BIG, ()]),
        _op("aten::mul", 20, 10, [other, ()]), _op("aten::tanh", 30, 10, [other]),
        _op("aten::mm", 40, 10, [(64, 64), (64, 64)]), _op("aten::tanh", 50, 10, [other]),
        _op("aten::neg", 60, 10, [(8, 8)]),
    ]  # fmt: skip
    t = memory_traffic(OpWindow(steps=1, start_ns=0, end_ns=100, ops=tuple(ops)))
    assert t is not None and t.chains == () and t.elementwise_ops_per_step == 5


def test_roofline_points_time_ops_by_their_kernels_on_a_gpu_and_by_themselves_on_a_cpu() -> None:
    from dataclasses import replace

    from pinchpoint.analysis.roofline import ceilings_from, roofline_points

    mm = _op("aten::mm", 0, 50_000, [(4096, 4096), (4096, 4096)])
    mm = replace(mm, flops=2 * 4096**3)
    relu = _op("aten::relu", 60_000, 20_000, [(4096, 4096)])
    tiny = _op("aten::relu", 90_000, 5_000, [(16, 16)])  # dispatch-bound: not on the roofline
    cpu = roofline_points(OpWindow(steps=2, start_ns=0, end_ns=100_000, ops=(mm, relu, tiny)))
    assert [(p.name, p.ns_per_step) for p in cpu] == [("mm", 25_000), ("relu", 10_000)]
    # The same ops on a GPU: the host spent 50 µs launching the matmul; its kernel ran 2.7 ms.
    gpu_ops = (replace(mm, device_ns=2_700_000), replace(relu, device_ns=40_000), tiny)
    gpu = roofline_points(OpWindow(steps=1, start_ns=0, end_ns=100_000, ops=gpu_ops))
    assert [(p.name, p.ns_per_step) for p in gpu] == [("mm", 2_700_000), ("relu", 40_000)]
    m = gpu[0]
    assert abs(m.achieved_flops - 2 * 4096**3 / 2.7e-3) < 1e6
    assert abs(m.intensity - 2 * 4096**3 / (3 * 4096 * 4096 * 4)) < 1e-9  # two inputs read, one written

    c = ceilings_from({"float32": 50e12, "tf32": 440e12, "bfloat16": 860e12}, 4e12, "test")
    assert c.attainable(m.intensity, "float", m.achieved_flops) == 50e12  # SIMT fp32: 51 TFLOP/s ≈ peak
    assert c.attainable(m.intensity, "float", 200e12) == 440e12  # 4x the SIMT peak: it ran as TF32
    assert c.attainable(0.1, "c10::BFloat16") == 4e12 * 0.1  # memory-bound


def test_kernels_find_their_launching_op_by_id_or_by_the_launch_time(tmp_path: Path) -> None:
    """2025 traces link kernel -> launch -> op by `External id`; 2022 ones number launches and kernels by
    correlation only, so the op is the innermost one whose time holds the launch. An op whose id merely
    equals a correlation number is not taken unless it holds the launch."""
    import json

    from pinchpoint.ingest.opwindow import read_opwindow

    def op(name: str, ts: float, dur: float, ext: int, dims: list[list[int]]) -> dict[str, object]:
        return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 7, "ts": ts, "dur": dur,
                "args": {"External id": ext, "Input Dims": dims, "Input type": ["float"] * len(dims)}}  # fmt: skip

    def launch(ts: float, corr: int, ext: int) -> dict[str, object]:
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7, "ts": ts,
                "dur": 2, "args": {"correlation": corr, "External id": ext}}  # fmt: skip

    def kernel(dur: float, corr: int, ext: int) -> dict[str, object]:
        return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 9, "ts": 1000, "dur": dur,
                "args": {"correlation": corr, "External id": ext}}  # fmt: skip

    events = [
        op("aten::linear", 100, 50, 1, [[64, 128], [256, 128]]),
        op("aten::addmm", 110, 30, 2, [[256], [64, 128], [128, 256]]),  # inner: launches at 120
        op("aten::relu", 200, 10, 900, [[64, 256]]),  # its id equals the 2022 launch's correlation
        launch(120, 900, 900), kernel(40, 900, 900),  # 2022: ids are the correlation
        launch(205, 901, 3), kernel(7, 901, 3),  # 2025: the launch names op 3 ... which does not exist
    ]  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = {o.name: o for o in read_opwindow(path, 1).ops}
    assert ops["aten::addmm"].device_ns == 40_000  # by the launch time, not by the colliding id
    assert ops["aten::relu"].device_ns == 7_000  # no op 3: the op that holds the launch at 205
    assert ops["aten::linear"].device_ns is None


SCORES = (8, 4, 256, 256)  # batch, heads, query and key positions


def _attention_step(
    t0: int, *, softmax_dims: tuple[int, ...] = SCORES, softmax: str = "aten::_softmax", dropout: bool = False
) -> list[OpEvent]:
    """One layer of nanoGPT's attention without flash (char_gpt_memmap.py), forward then backward
    (`softmax="aten::_safe_softmax"`, `dropout=True`: scaled_dot_product_attention's math path with
    dropout_p > 0, as a CPU runs it)."""
    bh = (32, 256, 32)
    ops = [
        ("aten::bmm", 2_000_000, [bh, (32, 32, 256)]),  # q @ k.T
        ("aten::mul", 1_000_000, [SCORES, ()]),  # * scale
        ("aten::eq", 10_000, [(1, 1, 256, 256), ()]),  # the mask's == 0 (not score-sized)
        ("aten::masked_fill", 4_000_000, [SCORES, (1, 1, 256, 256), ()]),
        ("aten::view", 5_000, [SCORES, ()]),  # a view moves nothing
        (softmax, 2_000_000, [softmax_dims, (), ()]),
        *([("aten::bernoulli_", 3_000_000, [SCORES, ()])] if dropout else []),
        ("aten::bmm", 2_000_000, [(32, 256, 256), bh]),  # @ v
        ("aten::_softmax_backward_data", 1_500_000, [SCORES, SCORES, (), ()]),
        ("aten::masked_fill", 3_500_000, [SCORES, (1, 1, 256, 256), ()]),
    ]
    out, t = [], t0
    for name, dur, dims in ops:
        out.append(_op(name, t, dur, dims))
        t += dur
    return out


def test_attention_written_out_in_ops_is_found_with_the_time_of_its_score_tensor_passes() -> None:
    ops = _attention_step(0) + _attention_step(50_000_000)
    t = memory_traffic(OpWindow(steps=2, start_ns=0, end_ns=100_000_000, ops=tuple(ops)))
    assert t is not None and t.attention is not None
    a = t.attention
    assert a.shape == SCORES and a.softmax_per_step == 1
    # scale, mask, softmax and their backward; not the matmuls, the view or the mask's own compare
    assert a.ns_per_step == 1_000_000 + 4_000_000 + 2_000_000 + 1_500_000 + 3_500_000
    assert a.top_ops[0] == ("aten::masked_fill", 7_500_000)
    assert not a.via_sdpa and not a.dropout


def test_scaled_dot_product_attentions_math_path_is_told_from_attention_written_by_hand() -> None:
    """Its softmax is `_safe_softmax` (hand-written attention calls `softmax`); the dropout on the scores
    is seen too (on a CPU, what keeps the call off the fused kernel)."""
    for dropout in (False, True):
        ops = _attention_step(0, softmax="aten::_safe_softmax", dropout=dropout)
        t = memory_traffic(OpWindow(steps=1, start_ns=0, end_ns=100_000_000, ops=tuple(ops)))
        assert t is not None and t.attention is not None
        assert t.attention.via_sdpa and t.attention.dropout is dropout


def test_a_softmax_over_logits_or_short_sequences_is_not_attention() -> None:
    logits = _attention_step(0, softmax_dims=(8, 65))  # classes, not key positions
    short = [
        _op("aten::bmm", 0, 10, [(32, 16, 32), (32, 32, 16)]),
        _op("aten::_softmax", 10, 10, [(8, 4, 16, 16), (), ()]),
    ]
    for ops in (logits, short):
        t = memory_traffic(OpWindow(steps=1, start_ns=0, end_ns=100_000_000, ops=tuple(ops)))
        assert t is not None and t.attention is None
