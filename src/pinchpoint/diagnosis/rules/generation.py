"""`compute.recompute`: a generation loop that runs its model over the whole sequence so far for every new
token (no KV cache), so each call's time grows with the context (`analysis/generation.py`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from pinchpoint.diagnosis.finding import Basis, Category, Confidence, Fact, Finding, FixKind
from pinchpoint.diagnosis.rules.base import Rule, Subject

SHARE_MIN = 0.10
"""Recomputed context worth at least 10% of the inference steps."""
CONFIDENT_CALLS = 32
"""Fitted on at least this many calls: the growth is measured, not guessed from a few."""


class Recompute(Rule):
    """Pattern: each model call of a generation loop takes the whole sequence so far (the token ids grow
    by one a call) and its time grows with that length.
    Why it's slow: every call recomputes the keys and values of every earlier token, in every layer:
    the work per token grows with the context, and a generation of n tokens does O(n²) of it.
    Fix: a KV cache: the first call (the prompt) fills each layer's keys and values, each later call
    feeds only the new token (`use_cache=True` / `past_key_values` in transformers; nanoGPT-style
    models need the cache added to their attention).
    Reference: the transformer decoding literature; Hugging Face's "KV cache" guide.
    Priced: each later call costs what a one-token call costs: the loop's own call replayed at exit with
    its last token alone (the context probe; basis "probe"), else the fitted line's base + one token
    (basis "model"). Attention over the cached keys still grows with the context (not priced: small
    beside the layers' matmuls at these lengths).
    """

    id: ClassVar[Category] = Category.COMPUTE_RECOMPUTE
    title: ClassVar[str] = "A generation loop recomputes its whole context for every token"
    requires: ClassVar[frozenset[str]] = frozenset({"steps"})

    def check(self, s: Subject) -> Iterable[Finding]:
        rank = s.recorded
        g = rank.generation
        if g is None or g.share < SHARE_MIN:
            return
        gain = g.steps_ns / max(1.0, g.steps_ns - g.saved_ns)
        yield Finding(
            id=self.id,
            title=Fact("rule.title", name=self.title),
            share=g.share,
            estimated_speedup=gain,
            basis=Basis.PROBE if g.probe is not None else Basis.MODEL,
            confidence=Confidence.HIGH if g.calls >= CONFIDENT_CALLS and g.checked else Confidence.MEDIUM,
            evidence=(
                Fact(
                    "compute.recompute.growth",
                    generations=g.generations,
                    calls=g.calls,
                    shortest=g.tokens[0],
                    longest=g.tokens[1],
                    per_token_ns=g.per_token_ns,
                    base_ns=g.base_ns,
                    checked=g.checked,
                ),
                *(
                    ()
                    if g.probe is None
                    else (
                        Fact(
                            "compute.recompute.probed",
                            tokens=g.probe.tokens,
                            full_ms=g.probe.full_ms,
                            one_ms=g.probe.one_ms,
                            pairs=g.probe.pairs,
                        ),
                    )
                ),
                Fact("compute.recompute.priced", saved_ns=g.saved_ns, calls_ns=g.calls_ns, share=g.share),
            ),
            fix=Fact("compute.recompute.fix"),
            snippet=Fact("compute.recompute.snippet"),
            ranks=(rank.rank,),
            fix_kind=FixKind.KV_CACHE,
        )
