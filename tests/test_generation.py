"""A generation loop without a KV cache: its calls' token counts (and last ids) read from the model's
input, the runs that take the previous call's ids plus one found, the growth fitted, what a cache saves
priced (`analysis/generation.py`)."""

from __future__ import annotations

import pytest
import torch

from pinchpoint.analysis.generation import MIN_RUN, recompute
from pinchpoint.capture.hooks import _tokens
from pinchpoint.trace.step import Step, StepKind

MS = 1_000_000


def _calls(
    lengths: list[int], *, base_ns: float = 800e3, per_token_ns: float = 20e3, tails: bool = True
) -> list[Step]:
    """Calls whose ids grow by the token each call sampled: call i's last id is 1000 + i, so call i + 1's
    next-to-last is call i's last."""
    out, t = [], 0
    for i, n in enumerate(lengths):
        dur = int(base_ns + per_token_ns * n)
        tail = (1000 + i - 1, 1000 + i) if tails else None
        out.append(Step(index=i, kind=StepKind.INFERENCE, start_ns=t, end_ns=t + dur, tokens=n, tail=tail))
        t += dur
    return out


def _with(s: Step, **changed: object) -> Step:
    fields = ("index", "kind", "start_ns", "end_ns", "tokens", "tail", "profiled")
    return Step(**{**{f: getattr(s, f) for f in fields}, **changed})  # type: ignore[arg-type]


def test_the_token_count_is_read_from_a_batch_of_token_ids_only() -> None:
    ids = torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]])
    with torch.no_grad():
        assert _tokens(ids, torch) == (4, (7, 8))  # the first row's last two ids
        assert _tokens(torch.zeros(4, 9, dtype=torch.int32), torch) == (9, (0, 0))
        assert _tokens(torch.zeros(1, 37), torch) == (None, None)  # features, not token ids
        assert _tokens(torch.zeros(37, dtype=torch.long), torch) == (None, None)
        assert _tokens(torch.zeros(2, 3, 4, dtype=torch.long), torch) == (None, None)
        assert _tokens("not a tensor", torch) == (None, None)
    assert _tokens(ids, torch) == (4, None)  # gradients on (training): the ids are not read


def test_generations_are_fitted_and_priced_from_their_own_calls() -> None:
    # two generations of 40 calls each (16 → 55 tokens), a call costing 0.8 ms + 20 µs a token
    steps = _calls(list(range(16, 56)) * 2)
    g = recompute(steps)
    assert g is not None and g.checked
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


def test_calls_of_other_sequences_that_grow_by_one_are_no_generation() -> None:
    """An inference loop over length-sorted batches grows by one token a call too; its ids are not the
    previous call's plus one, and where they were read that tells them apart."""
    steps = _calls(list(range(16, 56)))
    assert recompute([_with(s, tail=(7, 3 * s.index)) for s in steps]) is None
    unread = recompute(_calls(list(range(16, 56)), tails=False))  # ids on a GPU: lengths only
    assert unread is not None and not unread.checked


def test_steps_slowed_by_pinchpoint_or_another_load_are_not_fitted() -> None:
    steps = _calls(list(range(16, 56)))
    slow = [s if i % 5 else _with(s, end_ns=s.end_ns + 50 * MS, profiled=True) for i, s in enumerate(steps)]
    g = recompute(slow)
    assert g is not None and g.calls == 32 and g.per_token_ns == pytest.approx(20e3)
