"""A generation loop without a KV cache: its calls' token counts read from the model's input, the runs
that grow by one a call found, the growth fitted, what a cache saves priced (`analysis/generation.py`)."""

from __future__ import annotations

import pytest
import torch

from pinchpoint.analysis.generation import MIN_RUN, recompute
from pinchpoint.capture.hooks import _tokens
from pinchpoint.trace.step import Step, StepKind

MS = 1_000_000


def _calls(
    lengths: list[int], *, base_ns: float = 800e3, per_token_ns: float = 20e3, **flags: bool
) -> list[Step]:
    out, t = [], 0
    for i, n in enumerate(lengths):
        dur = int(base_ns + per_token_ns * n)
        out.append(Step(index=i, kind=StepKind.INFERENCE, start_ns=t, end_ns=t + dur, tokens=n, **flags))
        t += dur
    return out


def test_the_token_count_is_read_from_a_batch_of_token_ids_only() -> None:
    assert _tokens(torch.zeros(1, 37, dtype=torch.long)) == 37
    assert _tokens(torch.zeros(4, 9, dtype=torch.int32)) == 9
    assert _tokens(torch.zeros(1, 37)) is None  # features, not token ids
    assert _tokens(torch.zeros(37, dtype=torch.long)) is None
    assert _tokens(torch.zeros(2, 3, 4, dtype=torch.long)) is None
    assert _tokens("not a tensor") is None


def test_generations_are_fitted_and_priced_from_their_own_calls() -> None:
    # two generations of 40 calls each (16 → 55 tokens), a call costing 0.8 ms + 20 µs a token
    steps = _calls(list(range(16, 56)) * 2)
    g = recompute(steps)
    assert g is not None
    assert g.generations == 2 and g.calls == 80 and g.tokens == (16, 55)
    assert g.per_token_ns == pytest.approx(20e3) and g.base_ns == pytest.approx(800e3)
    # with a cache each call after the first costs 0.8 ms + one token: each saves 20 µs × (tokens - 1)
    saved = 2 * sum(20e3 * (n - 1) for n in range(17, 56))
    assert g.saved_ns == pytest.approx(saved)
    assert g.share == pytest.approx(saved / sum(s.dur_ns for s in steps))


def test_no_generation_where_lengths_do_not_grow_by_one_or_time_does_not_grow() -> None:
    assert recompute(_calls([16] * 50)) is None  # a server's fixed-length requests
    assert recompute(_calls(list(range(16, 16 + MIN_RUN - 1)))) is None  # too short a run to be one
    assert recompute(_calls(list(range(16, 100, 2)))) is None  # growing by two: not one token a call
    assert recompute(_calls(list(range(16, 60)), per_token_ns=0.0)) is None  # a cached loop's flat calls
    training = [
        Step(index=i, kind=StepKind.TRAIN, start_ns=i * MS, end_ns=(i + 1) * MS, tokens=64) for i in range(50)
    ]
    assert recompute(training) is None


def test_steps_slowed_by_pinchpoint_or_another_load_are_not_fitted() -> None:
    steps = _calls(list(range(16, 56)))
    slow = [s if i % 5 else Step(**{**{f: getattr(s, f) for f in ("index", "kind", "start_ns", "tokens")},
                                   "end_ns": s.end_ns + 50 * MS, "profiled": True})
            for i, s in enumerate(steps)]  # fmt: skip
    g = recompute(slow)
    assert g is not None and g.calls == 32 and g.per_token_ns == pytest.approx(20e3)
