"""compute.math (compute-bound steps, precision against the machine's matrix units) and compute.memory
(memory-bound elementwise ops, hand-written attention) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct

FP32_WHAT = {
    "convolutions": "fp32 convolutions",
    "convolutions_and_matmuls": "fp32 convolutions and matmuls",
    "matmuls": "fp32 matmuls",
}
"""What the fp32 time is in (`compute.math.fp32_share`'s `what`)."""
SHORT_DTYPE = {"bfloat16": "bf16", "float32": "fp32"}


def _dims(shape: tuple[int, ...]) -> str:
    return "×".join(map(str, shape))


def _flops(
    flops: float, flops_per_s: float, peak_flops_per_s: float | None, peak_frac: float | None, dtype: str
) -> str:
    line = f"Matmuls do {flops / 1e9:.2f} GFLOP per step: {flops_per_s / 1e9:.0f} GFLOP/s"
    if peak_flops_per_s is not None and peak_frac is not None:
        line += (
            f" over the whole step, {pct(peak_frac)} of what this machine's matmuls reach in "
            f"{SHORT_DTYPE[dtype]} ({peak_flops_per_s / 1e9:.0f} GFLOP/s measured on the "
            "window's heaviest matmul shape)"
        )
    return line


def _fp32_share(what: str, share: float, fp32_ns: float, conv_ns: float, conv_named: bool) -> str:
    return f"{FP32_WHAT[what]} take {pct(share)} of the step ({ms(fp32_ns)} per profiled step" + (
        f", {ms(conv_ns)} of it in convolutions)" if conv_named else ")"
    )


def _matmul_probe(shape: tuple[int, int, int], fp32_ns: float, bf16_ns: float) -> str:
    m, k, n = shape
    return (
        f"Measured here: a {m}×{k} @ {k}×{n} matmul takes {fp32_ns / 1e3:.0f} µs in fp32, "
        f"{bf16_ns / 1e3:.0f} µs in bf16"
    )


def _elementwise(
    share: float,
    elementwise_ns: float,
    ops: float,
    moved_bytes: float,
    achieved_bytes_per_s: float,
    copy_bytes_per_s: float | None,
) -> str:
    return (
        f"Elementwise ops on large tensors take {pct(share)} of the step "
        f"({ms(elementwise_ns)}): {ops:.0f} ops per step moving "
        f"{moved_bytes / 1e9:.2f} GB at {achieved_bytes_per_s / 1e9:.1f} GB/s"
        + (
            f" (this machine copies memory at {copy_bytes_per_s / 1e9:.1f} GB/s, measured)"
            if copy_bytes_per_s
            else ""
        )
    )


def _chain(ops: tuple[str, ...], shape: tuple[int, ...], dtype: str, chain_ns: float) -> str:
    names = ", ".join(ops) if len(ops) <= 12 else ", ".join(ops[:11]) + f", … ({len(ops)} ops)"
    return (
        f"{len(ops)} elementwise ops in a row on {_dims(shape)} ({dtype}) tensors: {names} — "
        f"{ms(chain_ns)} per step"
    )


def _attention(
    shape: tuple[int, ...],
    softmax_per_step: float,
    share: float,
    saving_ns: float,
    ops: tuple[tuple[str, float], ...],
    via_sdpa: bool = False,
) -> str:
    how = (
        "scaled_dot_product_attention runs its unfused math path"
        if via_sdpa
        else "Attention is written out in tensor ops"
    )
    return (
        f"{how}: softmax over a {_dims(shape)} score tensor "
        f"{softmax_per_step:.0f}× per step; the ops on that tensor besides its matmuls take "
        f"{pct(share)} of the step ({ms(saving_ns)}): "
        + ", ".join(f"{name.removeprefix('aten::')} {ms(ns)}" for name, ns in ops)
    )


_FUSE_TOO = (
    " Fuse the chains too: the framework's fused op for the function they spell out "
    "(F.gelu(x, approximate='tanh'); in transformers configs activation_function=\"gelu_pytorch_tanh\" "
    "for gelu_new), or torch.compile the module."
)


PHRASES: dict[str, Callable[..., str]] = {
    "compute.math.bound_title": lambda dtype: f"Compute-bound: the step is model math ({dtype})",
    "compute.math.phases": lambda inference, share, compute_ns: (
        f"{'Forward is' if inference else 'Forward, backward and optimizer are'} "
        f"{pct(share)} of the step ({ms(compute_ns)})"
    ),
    "compute.math.autocast": lambda dtype: f"Autocast runs matmuls in {dtype} already",
    "compute.math.flops": _flops,
    "compute.math.bound_fix": lambda: (
        "Time goes where it should. To go faster, do less math or do it better: torch.compile to fuse "
        "ops, a lower precision where accuracy allows, or a smaller model."
    ),
    "compute.math.emulated_title": lambda: (
        "bf16 autocast on a CPU without bf16 units: its matmuls run slower than in fp32"
    ),
    "compute.math.emulated_share": lambda share, bf16_ns: (
        f"bf16 matmuls and convolutions take {pct(share)} of the step ({ms(bf16_ns)} per profiled step); "
        "autocast runs them in bf16"
    ),
    "compute.math.no_bf16_units": lambda cpu: (
        f"This CPU ({cpu}) has no bf16 matrix units (no AVX512-BF16 or AMX): torch emulates bf16"
    ),
    "compute.math.probe_matmul_slower": lambda shape, fp32_ns, bf16_ns, slower_x: (
        _matmul_probe(shape, fp32_ns, bf16_ns) + f" (bf16 ×{slower_x:.1f} slower)"
    ),
    "compute.math.fp32_fix": lambda: (
        "Turn bf16 autocast off on this machine (keep it where the CPU has AVX512-BF16 or AMX)."
    ),
    "compute.math.fp32_snippet": lambda: (
        "bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()  # AVX512-BF16 / AMX\n"
        "with torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):\n"
        "    loss = criterion(model(x), y)"
    ),
    "compute.math.precision_title": lambda what, amx: (
        f"{FP32_WHAT[what]} on a CPU with bf16 matrix units" + (" (AMX)" if amx else "")
    ),
    "compute.math.fp32_share": _fp32_share,
    "compute.math.bf16_units": lambda cpu, units: (
        f"This CPU ({cpu}) has bf16 matrix units: {', '.join(units)}; autocast is off"
    ),
    "compute.math.probe_matmul": lambda shape, fp32_ns, bf16_ns, speedup: (
        _matmul_probe(shape, fp32_ns, bf16_ns) + f" (×{speedup:.1f})"
    ),
    "compute.math.probe_conv": lambda input_shape, weight_shape, fp32_ns, bf16_ns, speedup: (
        f"Measured here: a convolution of {_dims(input_shape)} by {_dims(weight_shape)} weights takes "
        f"{fp32_ns / 1e3:.0f} µs in fp32, {bf16_ns / 1e3:.0f} µs in bf16 (×{speedup:.1f})"
    ),
    "compute.math.bf16_fix": lambda: (
        "Run forward and loss under bf16 autocast (keep the optimizer step in fp32)."
    ),
    "compute.math.bf16_snippet": lambda: (
        "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "    loss = criterion(model(x), y)\n"
        "loss.backward(); optimizer.step()"
    ),
    "compute.memory.spread_title": lambda: "Memory-bound elementwise ops (no long chain to fuse)",
    "compute.memory.elementwise": _elementwise,
    "compute.memory.top_ops": lambda ops: (
        "Most of it: " + ", ".join(f"{name} {ms(ns)}" for name, ns in ops) + " per step"
    ),
    "compute.memory.chain": _chain,
    "compute.memory.fused": lambda chain_ns, fused_ns: (
        f"Fused, each chain would read and write its tensor once, like its slowest op alone: "
        f"{ms(chain_ns)} → {ms(fused_ns)} per step"
    ),
    "compute.memory.fix": lambda fusable: (
        "Fuse the chains: use the framework's fused op for the function they spell out "
        "(F.gelu(x, approximate='tanh'), F.silu, F.layer_norm, F.scaled_dot_product_attention), "
        "or torch.compile the module so its elementwise ops run as one kernel; prefer in-place "
        "ops where autograd allows."
        if fusable
        else "The elementwise time is spread over single ops, not long chains: little to gain from "
        "fusing by hand. torch.compile can still merge neighbours; a fused optimizer "
        "(AdamW(..., fused=True)) does its update in one pass."
    ),
    "compute.memory.snippet": lambda: (
        "h = torch.nn.functional.gelu(h, approximate='tanh')  # one kernel, not ~9\n"
        "# or: model = torch.compile(model)"
    ),
    "compute.memory.attention_title": lambda: (
        "Attention written by hand: its score tensor goes through memory op by op"
    ),
    "compute.memory.attention": _attention,
    "compute.memory.attention_fused": lambda saving_ns: (
        "A fused attention kernel computes the same result in tiles that never write the score tensor "
        f"out: ≈ {ms(saving_ns)} less per step (its matmuls' math stays)"
    ),
    "compute.memory.attention_fix": lambda chains=False: (
        "Call the fused kernel: F.scaled_dot_product_attention(q, k, v, is_causal=True) (or "
        "attn_mask=..., dropout_p=...) instead of softmax(q @ k.transpose(-2, -1) * scale + mask) @ v; "
        'in transformers models, attn_implementation="sdpa".' + (_FUSE_TOO if chains else "")
    ),
    "compute.memory.sdpa_math_title": lambda: (
        "Attention falls back to op-by-op math: its score tensor goes through memory op by op"
    ),
    "compute.memory.sdpa_math_fix": lambda dropout, chains=False: (
        (
            (
                "The model already calls F.scaled_dot_product_attention, but with attention dropout: on a CPU "
                "the fused kernel takes no dropout_p, so every call runs the math path. Train without "
                "attention dropout (dropout_p=0.0; in transformers configs attn_pdrop=0.0 or "
                "attention_dropout=0.0) if the model does not need it, or accept the cost."
            )
            if dropout
            else (
                "The model already calls F.scaled_dot_product_attention, but its inputs keep it off the fused "
                "kernels (dtype, mask, dropout or layout): make them eligible (a bool or additive mask, "
                "contiguous q/k/v, is_causal=True instead of a causal mask)."
            )
        )
        + (_FUSE_TOO if chains else "")
    ),
    "compute.memory.sdpa_math_snippet": lambda: (
        "config = GPT2Config(..., attn_pdrop=0.0)   # transformers: attention dropout off\n"
        "y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.0)"
    ),
    "compute.memory.attention_snippet": lambda: (
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "# not: att = (q @ k.transpose(-2, -1)) * scale; att = att.masked_fill(mask == 0, -inf)\n"
        "#      y = att.softmax(-1) @ v"
    ),
}
