"""Compute-bound steps, read against the machine's matrix units."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import ClassVar

from pinchpoint.analysis.attention import HandAttention
from pinchpoint.analysis.ops import BF16, FP32
from pinchpoint.analysis.roofline import Chain, MemoryTraffic
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject
from pinchpoint.trace.run import Environment, Phase

MIN_PROBE_GAIN = 1.3
"""The probe must show bf16 at least 1.3× faster than fp32 on the window's heaviest matmul shape;
tiny matmuls are overhead-bound and gain nothing from the matrix unit."""
FP32_MATMUL_SHARE_MIN = 0.10
"""fp32 matmul/conv above 10% of the step on a CPU with bf16 matrix units (cf. TorchTidy's TF32 rule,
rules-catalog §5b, and XProf's lower-precision suggestion, §1e)."""
COMPUTE_BOUND_SHARE = 0.50
"""Forward + backward + optimizer above half the step: the step is compute-bound (XProf §1e)."""
BF16_UNITS = ("amx_bf16", "avx512_bf16", "sme", "bf16")
MEMORY_BOUND_SHARE_MIN = 0.10
"""Elementwise ops on large tensors above 10% of the step (XProf flags memory-bound op time,
rules-catalog §1e; HTA/DLProf name fusion candidates the same way)."""
ATTENTION_SHARE_MIN = 0.05
"""Hand-written attention's passes over its score tensor at ≥ 5% of the step name the fused kernel."""
FUSION_GAIN_MIN = 1.15
"""Predict a gain from fusing only when the chains would give back at least ~15% of the step. Below
that the finding says where the memory time goes and claims no speedup: an optimizer's update and
autocast's casts are elementwise in any program, and on memory_leak.py the same code read ×1.00 in one
run and ×1.10 in the next (an unfused AdamW update as a 4-op chain), so smaller claims are noise."""
AUTOCAST_OVERHEAD = 1.15
"""Autocast adds casts around each matmul; the probe's pure matmul ratio is scaled by this."""


class ComputeMath(Rule):
    """Pattern: step time in arithmetic; in particular fp32 matmuls on a CPU whose matrix unit runs bf16.
    Why it's slow: AMX/bf16 units multiply bf16 several times faster than fp32 FMA units.
    Fix: torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss.
    Reference: rules-catalog §1e (compute-bound), §5a (tuning guide: mixed precision), §5b (TF32 rule).
    """

    id: ClassVar[Category] = Category.COMPUTE_MATH
    title: ClassVar[str] = "Compute-bound"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        env, rank = s.environment, s.recorded
        steps, ops = rank.steps, rank.ops
        if steps is None:
            return
        units = [u for u in env.cpu.matrix_units if u in BF16_UNITS]
        autocast = rank.main.autocast_dtype if rank.main is not None else None
        if ops is not None and units and autocast is None and ops.window_step_ns > 0:
            # Only matmuls on large tensors gain from the matrix unit: an LSTM cell loop's thousands of
            # small fp32 matmuls (LBFGS fit: ops on large tensors 12 of 196 ms) ran x0.62 under bf16
            # autocast, its casts dominating, and beside a busy core the window read them as 48% of it.
            large = ops.large_phase_op_ns_per_step or ops.fp32_matmul_ns_per_step
            share = min(1.0, min(ops.fp32_matmul_ns_per_step, large) / ops.window_step_ns)
            if share >= FP32_MATMUL_SHARE_MIN and _probe_gain(rank) >= MIN_PROBE_GAIN:
                yield self._precision(env, rank, share, units)
                return
        if ops is not None and not units and autocast == "bfloat16" and ops.window_step_ns > 0:
            emulated = self._emulated_bf16(env, rank)
            if emulated is not None:
                yield emulated
                return
        compute = sum(steps.share(p.value) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))
        if compute < COMPUTE_BOUND_SHARE:
            return
        dtype = autocast or "float32"
        evidence = [
            Fact(
                "compute.math.phases",
                inference=steps.kind == "inference",
                share=compute,
                compute_ns=compute * steps.mean_ns,
            )
        ]
        if autocast:
            evidence.append(Fact("compute.math.autocast", dtype=autocast))
        # (The FLOP count covers matmuls, not convolutions: it is only worth a line when matmuls hold
        # a tenth of the window's time.)
        mm_ns = sum(ops.matmul_ns_per_step.values()) - sum(ops.conv_ns_per_step.values()) if ops else 0.0
        if (
            ops is not None
            and ops.matmul_flops_per_step
            and steps.mean_ns
            and mm_ns >= 0.1 * ops.window_step_ns
        ):
            achieved = ops.matmul_flops_per_step / (steps.mean_ns / 1e9)
            probe_dtype = "bfloat16" if autocast == "bfloat16" else "float32"
            peak = _probe_flops(rank, probe_dtype)
            if peak is not None and achieved > peak:
                peak = (
                    None  # a probe slower than the whole step's rate (contended, a tiny shape) is no ceiling
                )
            evidence.append(
                Fact(
                    "compute.math.flops",
                    flops=ops.matmul_flops_per_step,
                    flops_per_s=achieved,
                    peak_flops_per_s=peak or None,
                    peak_frac=achieved / peak if peak else None,
                    dtype=probe_dtype,
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("compute.math.bound_title", dtype=dtype),
            share=compute,
            estimated_speedup=1.0,
            basis=Basis.NONE,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("compute.math.bound_fix"),
            ranks=(rank.rank,),
        )

    def _emulated_bf16(self, env: Environment, rank: RankAnalysis) -> Finding | None:
        """bf16 autocast on a CPU with no bf16 matrix units: torch emulates bf16 and the probe measures
        its matmuls (and convolutions) slower than fp32: the fix is fp32, priced at the probe's ratio."""
        ops = rank.ops
        assert ops is not None
        mm = {m.dtype: m for m in rank.probes.matmul if m.ns > 0}
        cv = {c.dtype: c for c in rank.probes.conv if c.ns > 0}
        bf16_ns = ops.matmul_ns_per_step.get(BF16, 0.0)
        conv_ns = ops.conv_ns_per_step.get(BF16, 0.0)
        share = min(1.0, bf16_ns / ops.window_step_ns)
        if share < FP32_MATMUL_SHARE_MIN or "float32" not in mm or "bfloat16" not in mm:
            return None
        r_mm = mm["bfloat16"].ns / mm["float32"].ns
        r_conv = cv["bfloat16"].ns / cv["float32"].ns if ("float32" in cv and "bfloat16" in cv) else r_mm
        slowdown = ((bf16_ns - conv_ns) * r_mm + conv_ns * r_conv) / bf16_ns if bf16_ns else r_mm
        if slowdown < MIN_PROBE_GAIN:
            return None
        evidence = (
            Fact("compute.math.emulated_share", share=share, bf16_ns=bf16_ns),
            Fact("compute.math.no_bf16_units", cpu=env.cpu.model),
            Fact(
                "compute.math.probe_matmul_slower",
                shape=mm["float32"].shape,
                fp32_ns=mm["float32"].ns,
                bf16_ns=mm["bfloat16"].ns,
                slower_x=r_mm,
            ),
        )
        speedup = 1.0 / (1.0 - share + share / slowdown)
        return Finding(
            id=self.id,
            title=Fact("compute.math.emulated_title"),
            share=share,
            estimated_speedup=max(1.0, speedup),
            basis=Basis.PROBE,
            confidence=Confidence.HIGH,
            evidence=evidence,
            fix=Fact("compute.math.fp32_fix"),
            snippet=Fact("compute.math.fp32_snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.FP32,
        )

    def _precision(self, env: Environment, rank: RankAnalysis, share: float, units: list[str]) -> Finding:
        assert rank.ops is not None and rank.steps is not None
        conv = rank.ops.conv_ns_per_step.get(FP32, 0.0)
        part = conv / rank.ops.fp32_matmul_ns_per_step if rank.ops.fp32_matmul_ns_per_step > 0 else 0.0
        what = "convolutions" if part >= 0.9 else "convolutions_and_matmuls" if part >= 0.5 else "matmuls"
        evidence = [
            Fact(
                "compute.math.fp32_share",
                what=what,
                share=share,
                fp32_ns=rank.ops.fp32_matmul_ns_per_step,
                conv_ns=conv,
                conv_named=0 < part < 0.9,
            ),
            Fact("compute.math.bf16_units", cpu=env.cpu.model, units=tuple(units)),
        ]
        ratio, measured = _bf16_ratio(rank)
        evidence.extend(measured)
        confidence = Confidence.HIGH if measured else Confidence.MEDIUM
        if ratio is None:
            ratio = 1 / 3
        effective = min(1.0, ratio * AUTOCAST_OVERHEAD)
        speedup = 1.0 / (1.0 - share + share * effective)
        return Finding(
            id=self.id,
            title=Fact("compute.math.precision_title", what=what, amx="amx_bf16" in units),
            share=share,
            estimated_speedup=max(1.0, speedup),
            basis=Basis.PROBE if measured else Basis.MODEL,
            confidence=confidence,
            evidence=tuple(evidence),
            fix=Fact("compute.math.bf16_fix"),
            snippet=Fact("compute.math.bf16_snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.BF16_AUTOCAST,
        )


def _probe_flops(rank: RankAnalysis, dtype: str) -> float | None:
    """FLOP/s of the matmul probe in `dtype` (the window's heaviest matmul shape, this machine)."""
    for m in rank.probes.matmul:
        if m.dtype == dtype and m.ns > 0:
            a, b, c = m.shape
            return 2 * a * b * c / (m.ns / 1e9)
    return None


def _probe_gain(rank: RankAnalysis) -> float:
    """fp32/bf16 time ratio the probes measured, over the window's fp32 matmul and convolution time;
    assumed worthwhile (inf) when not probed."""
    ratio, _ = _bf16_ratio(rank)
    return float("inf") if ratio is None else 1.0 / ratio


def _bf16_ratio(rank: RankAnalysis) -> tuple[float | None, list[Fact]]:
    """bf16/fp32 time of the window's fp32 matmul+conv time, each part at its probe's ratio (a part with
    no probe takes the other's), and the facts the probes measured; (None, []) with no probe."""
    lines: list[Fact] = []
    ops = rank.ops
    total = ops.fp32_matmul_ns_per_step if ops is not None else 0.0
    conv = ops.conv_ns_per_step.get(FP32, 0.0) if ops is not None else 0.0
    mm = {m.dtype: m for m in rank.probes.matmul if m.ns > 0}
    cv = {c.dtype: c for c in rank.probes.conv if c.ns > 0}
    r_mm = r_conv = None
    if "float32" in cv and "bfloat16" in cv and conv > 0:
        r_conv = cv["bfloat16"].ns / cv["float32"].ns
    if "float32" in mm and "bfloat16" in mm and (r_conv is None or total - conv >= 0.1 * total):
        # (a probe of the head's tiny matmul says nothing about a network of convolutions)
        r_mm = mm["bfloat16"].ns / mm["float32"].ns
        lines.append(
            Fact(
                "compute.math.probe_matmul",
                shape=mm["float32"].shape,
                fp32_ns=mm["float32"].ns,
                bf16_ns=mm["bfloat16"].ns,
                speedup=1 / r_mm,
            )
        )
    if r_conv is not None:
        lines.append(
            Fact(
                "compute.math.probe_conv",
                input_shape=cv["float32"].input,
                weight_shape=cv["float32"].weight,
                fp32_ns=cv["float32"].ns,
                bf16_ns=cv["bfloat16"].ns,
                speedup=1 / r_conv,
            )
        )
    if r_mm is None and r_conv is None:
        return None, lines
    a = r_mm if r_mm is not None else r_conv
    b = r_conv if r_conv is not None else r_mm
    assert a is not None and b is not None
    if total <= 0:
        return a, lines
    return ((total - conv) * a + conv * b) / total, lines


class ComputeMemory(Rule):
    """Pattern: elementwise ops on large tensors take a large part of the step; runs of them over the same
    tensor (an activation or normalisation written out in tensor ops, and their backward).
    Why it's slow: each op reads and writes the whole tensor at memory speed for ~1 operation per
    element; a chain of k ops moves the tensor through memory k times where one pass would do.
    Fix: the fused op (F.gelu(approximate="tanh"), F.silu, F.layer_norm, ...) or torch.compile.
    Reference: rules-catalog §1e (memory-bound ops), §6 (fusion candidates).
    """

    id: ClassVar[Category] = Category.COMPUTE_MEMORY
    title: ClassVar[str] = "Memory-bound elementwise ops: chains that fusion would collapse"
    requires: ClassVar[frozenset[str]] = frozenset({"steps", "traffic"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        steps, traffic = rank.steps, rank.traffic
        if steps is None or traffic is None or steps.mean_ns <= 0:
            return
        step_ns = steps.mean_ns
        share = min(1.0, traffic.elementwise_ns_per_step / step_ns)
        if share < MEMORY_BOUND_SHARE_MIN:
            return
        rate = traffic.achieved_bytes_per_s
        evidence = [
            Fact(
                "compute.memory.elementwise",
                share=share,
                elementwise_ns=traffic.elementwise_ns_per_step,
                ops=traffic.elementwise_ops_per_step,
                moved_bytes=traffic.bytes_per_step,
                achieved_bytes_per_s=rate,
                copy_bytes_per_s=rank.probes.memory_bytes_per_s or None,
            )
        ]
        if traffic.top_ops:
            evidence.append(Fact("compute.memory.top_ops", ops=tuple(traffic.top_ops)))
        attention = traffic.attention
        if attention is not None and attention.ns_per_step / step_ns >= ATTENTION_SHARE_MIN:
            yield _hand_attention(rank, attention, traffic, share, evidence, step_ns)
            return
        saving = min(traffic.fusion_saving_ns_per_step, 0.95 * step_ns)
        speedup = step_ns / (step_ns - saving) if saving > 0 else 1.0
        fusable = speedup >= FUSION_GAIN_MIN
        for c in traffic.chains[:2] if fusable else ():
            evidence.append(_chain_line(c))
        if fusable:
            evidence.append(
                Fact(
                    "compute.memory.fused",
                    chain_ns=traffic.chain_ns_per_step,
                    fused_ns=traffic.chain_ns_per_step - saving,
                )
            )
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title) if fusable else Fact("compute.memory.spread_title"),
            share=share,
            estimated_speedup=max(1.0, speedup) if fusable else 1.0,
            basis=Basis.MODEL if fusable else Basis.NONE,
            confidence=Confidence.HIGH if fusable else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=Fact("compute.memory.fix", fusable=fusable),
            snippet=Fact("compute.memory.snippet") if fusable else None,
            ranks=(rank.rank,),
        )


def _hand_attention(
    rank: RankAnalysis,
    attention: HandAttention,
    traffic: MemoryTraffic,
    share: float,
    evidence: list[Fact],
    step_ns: float,
) -> Finding:
    """Attention written out in ops: the fused kernel saves the passes over the score tensor. Chains on
    other tensors (GPT-2's tanh GELU spelled out in ops beside it) are named too when they give back
    `ATTENTION_SHARE_MIN` of the step, and their saving joins the estimate."""
    saving = min(attention.ns_per_step, 0.95 * step_ns)
    evidence.append(
        Fact(
            "compute.memory.attention",
            shape=attention.shape,
            softmax_per_step=attention.softmax_per_step,
            share=saving / step_ns,
            saving_ns=saving,
            ops=tuple(attention.top_ops),
            via_sdpa=attention.via_sdpa,
        )
    )
    evidence.append(Fact("compute.memory.attention_fused", saving_ns=saving))
    others = replace(traffic, chains=tuple(c for c in traffic.chains if c.shape != attention.shape))
    chain_saving = others.fusion_saving_ns_per_step
    fuse = chain_saving >= ATTENTION_SHARE_MIN * step_ns
    if fuse:
        chain_ns = others.chain_ns_per_step
        evidence.extend(_chain_line(c) for c in others.chains[:2])
        evidence.append(Fact("compute.memory.fused", chain_ns=chain_ns, fused_ns=chain_ns - chain_saving))
        saving = min(saving + chain_saving, 0.95 * step_ns)
    # The program may call F.scaled_dot_product_attention already (its math path's softmax ran): telling
    # it to call the fused kernel is wrong. On a CPU attention dropout is what sends it there (torch's
    # fused CPU kernel takes no dropout_p; a transformers GPT-2 with attn_pdrop=0.1 ran the math path,
    # and attn_pdrop=0.0 measured x1.07-1.14 against the attention part's x1.11).
    dropout = attention.via_sdpa and attention.dropout and (rank.main is None or not rank.main.cuda_devices)
    if attention.via_sdpa:
        title = Fact("compute.memory.sdpa_math_title")
        fix = Fact("compute.memory.sdpa_math_fix", dropout=dropout, chains=fuse)
        snippet = Fact("compute.memory.sdpa_math_snippet") if dropout else None
    else:
        title = Fact("compute.memory.attention_title")
        fix = Fact("compute.memory.attention_fix", chains=fuse)
        snippet = Fact("compute.memory.attention_snippet")
    return Finding(
        id=Category.COMPUTE_MEMORY,
        title=title,
        share=max(share, min(1.0, saving / step_ns)),
        estimated_speedup=step_ns / (step_ns - saving),
        basis=Basis.MODEL,
        confidence=Confidence.MEDIUM,
        evidence=tuple(evidence),
        fix=fix,
        snippet=snippet,
        ranks=(rank.rank,),
    )


def _chain_line(c: Chain) -> Fact:
    return Fact("compute.memory.chain", ops=c.ops, shape=c.shape, dtype=c.dtype, chain_ns=c.ns_per_step)
