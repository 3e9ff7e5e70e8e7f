"""Compute-bound steps, read against the machine's matrix units."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.attention import HandAttention
from pinchpoint.analysis.ops import BF16, FP32
from pinchpoint.analysis.roofline import Chain
from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject, ms, pct
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
            share = min(1.0, ops.fp32_matmul_ns_per_step / ops.window_step_ns)
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
            f"{'Forward is' if steps.kind == 'inference' else 'Forward, backward and optimizer are'} "
            f"{pct(compute)} of the step ({ms(compute * steps.mean_ns)})"
        ]
        if autocast:
            evidence.append(f"Autocast runs matmuls in {autocast} already")
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
            line = f"Matmuls do {ops.matmul_flops_per_step / 1e9:.2f} GFLOP per step: {achieved / 1e9:.0f} GFLOP/s"
            peak = _probe_flops(rank, "bfloat16" if autocast == "bfloat16" else "float32")
            if peak:
                line += (
                    f" over the whole step, {pct(achieved / peak)} of what this machine's matmuls reach in "
                    f"{'bf16' if autocast == 'bfloat16' else 'fp32'} ({peak / 1e9:.0f} GFLOP/s measured on the "
                    "window's heaviest matmul shape)"
                )
            evidence.append(line)
        yield Finding(
            id=self.id,
            title=f"Compute-bound: the step is model math ({dtype})",
            share=compute,
            estimated_speedup=1.0,
            confidence=Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=(
                "Time goes where it should. To go faster, do less math or do it better: torch.compile to fuse "
                "ops, a lower precision where accuracy allows, or a smaller model."
            ),
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
        m, k, n = mm["float32"].shape
        evidence = [
            f"bf16 matmuls and convolutions take {pct(share)} of the step ({ms(bf16_ns)} per profiled step); "
            "autocast runs them in bf16",
            f"This CPU ({env.cpu.model}) has no bf16 matrix units (no AVX512-BF16 or AMX): torch emulates bf16",
            f"Measured here: a {m}×{k} @ {k}×{n} matmul takes {mm['float32'].ns / 1e3:.0f} µs in fp32, "
            f"{mm['bfloat16'].ns / 1e3:.0f} µs in bf16 (bf16 ×{r_mm:.1f} slower)",
        ]
        speedup = 1.0 / (1.0 - share + share / slowdown)
        return Finding(
            id=self.id,
            title="bf16 autocast on a CPU without bf16 units: its matmuls run slower than in fp32",
            share=share,
            estimated_speedup=max(1.0, speedup),
            confidence=Confidence.HIGH,
            evidence=tuple(evidence),
            fix="Turn bf16 autocast off on this machine (keep it where the CPU has AVX512-BF16 or AMX).",
            snippet=(
                "bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()  # AVX512-BF16 / AMX\n"
                "with torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):\n"
                "    loss = criterion(model(x), y)"
            ),
            ranks=(rank.rank,),
            fix_kind=FixKind.FP32,
        )

    def _precision(self, env: Environment, rank: RankAnalysis, share: float, units: list[str]) -> Finding:
        assert rank.ops is not None and rank.steps is not None
        conv = rank.ops.conv_ns_per_step.get(FP32, 0.0)
        part = conv / rank.ops.fp32_matmul_ns_per_step if rank.ops.fp32_matmul_ns_per_step > 0 else 0.0
        what = (
            "fp32 convolutions"
            if part >= 0.9
            else "fp32 convolutions and matmuls"
            if part >= 0.5
            else "fp32 matmuls"
        )
        evidence = [
            f"{what} take {pct(share)} of the step ({ms(rank.ops.fp32_matmul_ns_per_step)} per profiled step"
            + (f", {ms(conv)} of it in convolutions)" if 0 < part < 0.9 else ")"),
            f"This CPU ({env.cpu.model}) has bf16 matrix units: {', '.join(units)}; autocast is off",
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
            title=f"{what} on a CPU with bf16 matrix units" + (" (AMX)" if "amx_bf16" in units else ""),
            share=share,
            estimated_speedup=max(1.0, speedup),
            confidence=confidence,
            evidence=tuple(evidence),
            fix="Run forward and loss under bf16 autocast (keep the optimizer step in fp32).",
            snippet=(
                "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
                "    loss = criterion(model(x), y)\n"
                "loss.backward(); optimizer.step()"
            ),
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


def _bf16_ratio(rank: RankAnalysis) -> tuple[float | None, list[str]]:
    """bf16/fp32 time of the window's fp32 matmul+conv time, each part at its probe's ratio (a part with
    no probe takes the other's), and the evidence lines of the probes; (None, []) with no probe."""
    lines: list[str] = []
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
        m, k, n = mm["float32"].shape
        lines.append(
            f"Measured here: a {m}×{k} @ {k}×{n} matmul takes {mm['float32'].ns / 1e3:.0f} µs in fp32, "
            f"{mm['bfloat16'].ns / 1e3:.0f} µs in bf16 (×{1 / r_mm:.1f})"
        )
    if r_conv is not None:
        x, w = cv["float32"].input, cv["float32"].weight
        lines.append(
            f"Measured here: a convolution of {'×'.join(map(str, x))} by {'×'.join(map(str, w))} weights takes "
            f"{cv['float32'].ns / 1e3:.0f} µs in fp32, {cv['bfloat16'].ns / 1e3:.0f} µs in bf16 (×{1 / r_conv:.1f})"
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
            f"Elementwise ops on large tensors take {pct(share)} of the step "
            f"({ms(traffic.elementwise_ns_per_step)}): {traffic.elementwise_ops_per_step:.0f} ops per step moving "
            f"{traffic.bytes_per_step / 1e9:.2f} GB at {rate / 1e9:.1f} GB/s"
            + (
                f" (this machine copies memory at {rank.probes.memory_bytes_per_s / 1e9:.1f} GB/s, measured)"
                if rank.probes.memory_bytes_per_s
                else ""
            )
        ]
        if traffic.top_ops:
            evidence.append(
                "Most of it: " + ", ".join(f"{name} {ms(ns)}" for name, ns in traffic.top_ops) + " per step"
            )
        attention = traffic.attention
        if attention is not None and attention.ns_per_step / step_ns >= ATTENTION_SHARE_MIN:
            yield _hand_attention(rank, attention, share, evidence, step_ns)
            return
        saving = min(traffic.fusion_saving_ns_per_step, 0.95 * step_ns)
        speedup = step_ns / (step_ns - saving) if saving > 0 else 1.0
        fusable = speedup >= FUSION_GAIN_MIN
        for c in traffic.chains[:2] if fusable else ():
            evidence.append(_chain_line(c))
        if fusable:
            evidence.append(
                f"Fused, each chain would read and write its tensor once, like its slowest op alone: "
                f"{ms(traffic.chain_ns_per_step)} → {ms(traffic.chain_ns_per_step - saving)} per step"
            )
        yield Finding(
            id=self.id,
            title=self.title if fusable else "Memory-bound elementwise ops (no long chain to fuse)",
            share=share,
            estimated_speedup=max(1.0, speedup) if fusable else 1.0,
            confidence=Confidence.HIGH if fusable else Confidence.MEDIUM,
            evidence=tuple(evidence),
            fix=(
                "Fuse the chains: use the framework's fused op for the function they spell out "
                "(F.gelu(x, approximate='tanh'), F.silu, F.layer_norm, F.scaled_dot_product_attention), "
                "or torch.compile the module so its elementwise ops run as one kernel; prefer in-place "
                "ops where autograd allows."
                if fusable
                else "The elementwise time is spread over single ops, not long chains: little to gain from "
                "fusing by hand. torch.compile can still merge neighbours; a fused optimizer "
                "(AdamW(..., fused=True)) does its update in one pass."
            ),
            snippet=(
                "h = torch.nn.functional.gelu(h, approximate='tanh')  # one kernel, not ~9\n"
                "# or: model = torch.compile(model)"
                if fusable
                else None
            ),
            ranks=(rank.rank,),
        )


def _hand_attention(
    rank: RankAnalysis, attention: HandAttention, share: float, evidence: list[str], step_ns: float
) -> Finding:
    """Attention written out in ops: the fused kernel saves the passes over the score tensor."""
    saving = min(attention.ns_per_step, 0.95 * step_ns)
    shape = "×".join(map(str, attention.shape))
    evidence.append(
        f"Attention is written out in tensor ops: softmax over a {shape} score tensor "
        f"{attention.softmax_per_step:.0f}× per step; the ops on that tensor besides its matmuls take "
        f"{pct(saving / step_ns)} of the step ({ms(saving)}): "
        + ", ".join(f"{name.removeprefix('aten::')} {ms(ns)}" for name, ns in attention.top_ops)
    )
    evidence.append(
        "A fused attention kernel computes the same result in tiles that never write the score tensor "
        f"out: ≈ {ms(saving)} less per step (its matmuls' math stays)"
    )
    return Finding(
        id=Category.COMPUTE_MEMORY,
        title="Attention written by hand: its score tensor goes through memory op by op",
        share=max(share, min(1.0, saving / step_ns)),
        estimated_speedup=step_ns / (step_ns - saving),
        confidence=Confidence.MEDIUM,
        evidence=tuple(evidence),
        fix=(
            "Call the fused kernel: F.scaled_dot_product_attention(q, k, v, is_causal=True) (or "
            "attn_mask=..., dropout_p=...) instead of softmax(q @ k.transpose(-2, -1) * scale + mask) @ v; "
            'in transformers models, attn_implementation="sdpa".'
        ),
        snippet=(
            "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
            "# not: att = (q @ k.transpose(-2, -1)) * scale; att = att.masked_fill(mask == 0, -inf)\n"
            "#      y = att.softmax(-1) @ v"
        ),
        ranks=(rank.rank,),
    )


def _chain_line(c: Chain) -> str:
    names = ", ".join(c.ops) if len(c.ops) <= 12 else ", ".join(c.ops[:11]) + f", … ({len(c.ops)} ops)"
    shape = "×".join(str(d) for d in c.shape)
    return f"{len(c.ops)} elementwise ops in a row on {shape} ({c.dtype}) tensors: {names} — {ms(c.ns_per_step)} per step"
