"""compute.recompute (a generation loop without a KV cache) in words."""

from __future__ import annotations

from collections.abc import Callable

from pinchpoint.report.phrases.units import ms, pct


def _us(ns: float) -> str:
    return f"{ns / 1e3:.0f} µs" if ns >= 1e4 else f"{ns / 1e3:.1f} µs"


PHRASES: dict[str, Callable[..., str]] = {
    "compute.recompute.growth": lambda generations, calls, shortest, longest, per_token_ns, base_ns, checked: (
        f"{calls} model calls in {generations} generation{'s' if generations != 1 else ''} took the whole "
        f"sequence so far, {shortest} to {longest} tokens, one more each call"
        + (
            " (each call's ids were the previous call's plus the one sampled, read back)"
            if checked
            else " (lengths only: the ids were not read where that would sync a device)"
        )
        + (
            f"; each token of context added {_us(per_token_ns)} to a call (fitted on those calls: "
            f"{_us(base_ns)} + {_us(per_token_ns)} a token)"
            if per_token_ns > 0
            else "; their time did not grow measurably with the context"
        )
    ),
    "compute.recompute.probed": lambda tokens, full_ms, one_ms, pairs: (
        f"The loop's own call, replayed at exit: {full_ms:.3g} ms with its {tokens} tokens, {one_ms:.3g} ms "
        f"with its last token alone — what each call after the prompt costs with a cache "
        f"(measured, {pairs} pair{'s' if pairs != 1 else ''})"
    ),
    "compute.recompute.priced": lambda saved_ns, calls_ns, share: (
        f"With a cache each call after the prompt feeds one token: {ms(saved_ns)} of their {ms(calls_ns)} "
        f"would go, {pct(share)} of the inference steps (attention over the cached keys, which still grows "
        "with the context, not priced)"
    ),
    "compute.recompute.fix": lambda: (
        "Keep each layer's keys and values (a KV cache): run the prompt once, then feed only the new token "
        "with the cache (transformers: use_cache=True and past_key_values; a nanoGPT-style model: add the "
        "cache to its attention)."
    ),
    "compute.recompute.snippet": lambda: (
        "logits, cache = model(prompt, cache=None)           # the prompt once: fills the cache\n"
        "for _ in range(max_new_tokens):\n"
        "    logits, cache = model(next_token, cache=cache)  # one token a call"
    ),
}
