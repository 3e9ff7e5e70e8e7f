"""Compute-bound steps, read against the machine's matrix units."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Category, Confidence, Finding
from pinchpoint.diagnosis.rules.base import ms, pct
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
AUTOCAST_OVERHEAD = 1.15
"""Autocast adds casts around each matmul; the probe's pure matmul ratio is scaled by this."""


class ComputeMath:
    """Pattern: step time in arithmetic; in particular fp32 matmuls on a CPU whose matrix unit runs bf16.
    Why it's slow: AMX/bf16 units multiply bf16 several times faster than fp32 FMA units.
    Fix: torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss.
    Reference: rules-catalog §1e (compute-bound), §5a (tuning guide: mixed precision), §5b (TF32 rule).
    """

    id: ClassVar[Category] = Category.COMPUTE_MATH
    title: ClassVar[str] = "Compute-bound"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, env: Environment, rank: RankAnalysis) -> Iterable[Finding]:
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
        compute = sum(steps.share(p.value) for p in (Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER))
        if compute < COMPUTE_BOUND_SHARE:
            return
        dtype = autocast or "float32"
        evidence = [
            f"Forward, backward and optimizer are {pct(compute)} of the step ({ms(compute * steps.mean_ns)})"
        ]
        if autocast:
            evidence.append(f"Autocast runs matmuls in {autocast} already")
        if ops is not None and ops.matmul_flops_per_step and ops.window_step_ns:
            gflops = ops.matmul_flops_per_step / ops.window_step_ns
            evidence.append(
                f"Matmuls do {ops.matmul_flops_per_step / 1e9:.2f} GFLOP per step (≥ {gflops:.0f} GFLOP/s)"
            )
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

    def _precision(self, env: Environment, rank: RankAnalysis, share: float, units: list[str]) -> Finding:
        assert rank.ops is not None and rank.steps is not None
        probe = {m.dtype: m for m in rank.probes.matmul if m.ns > 0}
        ratio = None
        evidence = [
            f"fp32 matmuls take {pct(share)} of the step ({ms(rank.ops.fp32_matmul_ns_per_step)} per profiled step)",
            f"This CPU ({env.cpu.model}) has bf16 matrix units: {', '.join(units)}; autocast is off",
        ]
        if "float32" in probe and "bfloat16" in probe and probe["float32"].ns > 0:
            ratio = probe["bfloat16"].ns / probe["float32"].ns
            m, k, n = probe["float32"].shape
            evidence.append(
                f"Measured here: a {m}×{k} @ {k}×{n} matmul takes {probe['float32'].ns / 1e3:.0f} µs in fp32, "
                f"{probe['bfloat16'].ns / 1e3:.0f} µs in bf16 (×{1 / ratio:.1f})"
            )
            confidence = Confidence.HIGH
        else:
            ratio = 1 / 3
            confidence = Confidence.MEDIUM
        effective = min(1.0, ratio * AUTOCAST_OVERHEAD)
        speedup = 1.0 / (1.0 - share + share * effective)
        return Finding(
            id=self.id,
            title="fp32 matmuls on a CPU with bf16 matrix units (AMX)"
            if "amx_bf16" in units
            else "fp32 matmuls on a CPU with bf16 matrix units",
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
        )


def _probe_gain(rank: RankAnalysis) -> float:
    """fp32/bf16 time ratio the matmul probe measured; assumed worthwhile (inf) when not probed."""
    probe = {m.dtype: m.ns for m in rank.probes.matmul if m.ns > 0}
    if probe.get("float32") and probe.get("bfloat16"):
        return probe["float32"] / probe["bfloat16"]
    return float("inf")
