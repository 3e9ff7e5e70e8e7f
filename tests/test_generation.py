"""A generation loop without a KV cache: its calls' token counts (and last ids) read from the model's
input, the runs that take the previous call's ids plus one found, the growth fitted, what a cache saves
priced (`analysis/generation.py`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pinchpoint.analysis.generation import MIN_RUN, recompute
from pinchpoint.capture.context_probe import FILE as CONTEXT_FILE
from pinchpoint.capture.context_probe import RUN as CONTEXT_RUN
from pinchpoint.capture.context_probe import ContextProbe
from pinchpoint.capture.hooks import _tokens
from pinchpoint.ingest.context import context_cost
from pinchpoint.trace.generation import ContextCost
from pinchpoint.trace.step import Interval, Phase, Step, StepKind

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


def test_a_servers_streams_taking_turns_are_each_a_generation() -> None:
    """Three requests in flight, one token of each a call in turn (an async server's streams), each with
    ids of its own: three generations, although no two consecutive calls are of one."""
    streams = [_calls(list(range(16 + k, 56 + k))) for k in range(3)]
    for k, calls in enumerate(streams):  # each stream's ids its own: call i's last id 1000·k + i
        streams[k] = [_with(s, tail=(1000 * k + s.index - 1, 1000 * k + s.index)) for s in calls]
    turns = [s for three in zip(*streams, strict=True) for s in three]
    g = recompute(turns)
    assert g is not None and g.generations == 3 and g.calls == 120
    alike = [s for three in zip(*[_calls(list(range(16, 56)))] * 3, strict=True) for s in three]
    same = recompute(alike)  # three streams of one prompt (and the same tokens): alike, any pairing will do
    assert same is not None and same.generations == 3 and same.calls == 120


def test_steps_slowed_by_pinchpoint_or_another_load_are_not_fitted() -> None:
    steps = _calls(list(range(16, 56)))
    slow = [s if i % 5 else _with(s, end_ns=s.end_ns + 50 * MS, profiled=True) for i, s in enumerate(steps)]
    g = recompute(slow)
    assert g is not None and g.calls == 32 and g.per_token_ns == pytest.approx(20e3)


def _probe(tokens: int, full_ms: float, one_ms: float) -> ContextCost:
    return ContextCost(tokens=tokens, full_ms=full_ms, one_ms=one_ms, pairs=7)


def test_a_probe_prices_each_later_call_at_its_one_token_call() -> None:
    """The fitted line's intercept is no one-token call (another kernel path at T = 1): where the probe
    replayed the loop's call, each later call is priced at the probe's one-token time, scaled by the run's
    own cost of the probe's full call."""
    steps = _calls(list(range(16, 56)))
    # the probe ran at half the run's speed: its 30-token call 2.8 ms against the run's 1.4 ms (the
    # median of the run's calls within NEAR tokens of 30)
    g = recompute(steps, _probe(30, full_ms=2.8, one_ms=0.6))
    assert g is not None and g.probe is not None
    assert g.one_ns == pytest.approx(0.3 * MS)
    saved = sum(s.dur_ns - 0.3 * MS for s in steps[1:])
    assert g.saved_ns == pytest.approx(saved)
    line = recompute(steps)
    assert line is not None and line.probe is None and line.saved_ns < g.saved_ns


def test_a_probe_prices_a_loop_whose_time_does_not_visibly_grow() -> None:
    flat = _calls(list(range(16, 56)), per_token_ns=0.0)  # 0.8 ms at every length
    assert recompute(flat) is None
    g = recompute(flat, _probe(30, full_ms=0.8, one_ms=0.5))
    assert g is not None and g.share == pytest.approx(39 * 0.3 / (40 * 0.8))


def test_a_probe_is_scaled_by_the_model_calls_alone_not_the_sampling_beside_them() -> None:
    """A generation step holds the call and the sampling after it; a cache takes time off the call only."""
    steps = [
        Step(
            index=s.index, kind=s.kind, start_ns=s.start_ns, end_ns=s.end_ns + MS, tokens=s.tokens, tail=s.tail,
            intervals=(Interval(phase=Phase.FORWARD, start_ns=s.start_ns, end_ns=s.end_ns),),
        )
        for s in _calls(list(range(16, 56)))
    ]  # fmt: skip
    g = recompute(steps, _probe(30, full_ms=1.4, one_ms=0.7))
    assert g is not None and g.one_ns == pytest.approx(0.7 * MS)
    assert g.saved_ns == pytest.approx(sum((s.intervals[0].dur_ns - 0.7 * MS) for s in steps[1:]))


def test_a_probe_that_found_one_token_no_cheaper_is_not_used() -> None:
    steps = _calls(list(range(16, 56)))
    g = recompute(steps, _probe(20, full_ms=1.0, one_ms=1.1))
    line = recompute(steps)
    assert g is not None and line is not None and g.probe is None and g.saved_ns == line.saved_ns


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[]",
        '{"tokens": 40}',
        '{"tokens": 1, "full_ms": 2, "one_ms": 1}',
        '{"tokens": 40, "full_ms": -2, "one_ms": 1}',
        '{"tokens": 40, "full_ms": "2", "one_ms": 1}',
        '{"tokens": true, "full_ms": 2, "one_ms": 1}',
        '{"tokens": 40, "full_ms": 2, "one_ms": 0}',
    ],
)
def test_a_damaged_context_probe_file_is_no_probe(tmp_path: Path, text: str) -> None:
    (tmp_path / CONTEXT_FILE).write_text(text)
    assert context_cost(tmp_path, []) is None


def test_a_context_probe_file_is_read(tmp_path: Path) -> None:
    (tmp_path / CONTEXT_FILE).write_text(
        '{"tokens": 39, "full_ms": 1.3, "one_ms": 0.66, "pairs": 7, "start_ns": 10, "end_ns": 5}'
    )
    c = context_cost(tmp_path, [])
    assert c == ContextCost(tokens=39, full_ms=1.3, one_ms=0.66, pairs=7, start_ns=10, end_ns=10)
    assert context_cost(tmp_path / "absent", []) is None


class _TinyLM(torch.nn.Module):
    """Embeds ids and mixes them over the sequence: a real model whose call takes any length."""

    def __init__(self, refuse_one: bool = False) -> None:
        super().__init__()
        self.emb, self.out, self.refuse_one = torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64), refuse_one
        self.lengths: list[int] = []

    def forward(self, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self.lengths.append(int(ids.shape[1]))
        if self.refuse_one and ids.shape[1] == 1:
            raise ValueError("needs a context")
        if mask is not None:
            assert mask.shape == ids.shape
        return self.out(self.emb(ids).cumsum(1)[:, -1])


def _generate(probe: ContextProbe, model: _TinyLM, start: int, n: int, *, mask: bool = False) -> None:
    ids = torch.arange(start, start + 4).unsqueeze(0) % 64
    with torch.no_grad():
        for _ in range(n):
            tokens, tail = _tokens(ids, torch)
            assert tokens is not None and tail is not None
            kwargs = {"mask": torch.ones_like(ids)} if mask else {}
            probe.note(model, (ids,), kwargs, tokens, tail, torch)
            nxt = model(ids, **kwargs).argmax(-1, keepdim=True)
            ids = torch.cat((ids, nxt), 1)


def test_the_context_probe_replays_the_loops_own_call_whole_and_cut_to_one_token(tmp_path: Path) -> None:
    quiet: list[bool] = []
    probe = ContextProbe(lambda: tmp_path, quiet.append)
    model = _TinyLM()
    _generate(probe, model, 0, CONTEXT_RUN - 1, mask=True)
    assert probe.kept is None  # one call short of a generation
    _generate(probe, model, 5, CONTEXT_RUN + 3, mask=True)  # another generation: counted from its start
    assert probe.kept is not None and probe.tokens == 4 + CONTEXT_RUN - 1
    model.lengths.clear()
    probe.run(torch)
    doc = json.loads((tmp_path / CONTEXT_FILE).read_text())
    assert doc["tokens"] == 4 + CONTEXT_RUN - 1 and doc["pairs"] >= 1
    assert doc["full_ms"] > 0 and doc["one_ms"] > 0 and doc["end_ns"] >= doc["start_ns"]
    assert set(model.lengths) == {doc["tokens"], 1}  # the kept call whole, and its mask cut beside its ids
    assert quiet == [True, False]  # pinchpoint's own recording off while it replays


def test_the_context_probe_follows_streams_that_take_turns(tmp_path: Path) -> None:
    probe = ContextProbe(lambda: tmp_path, lambda on: None)
    model = _TinyLM()
    ids = [torch.tensor([[k, k + 1, k + 2]]) for k in (3, 30)]  # two requests in flight
    with torch.no_grad():
        for _ in range(CONTEXT_RUN - 1):
            for k in range(2):
                tokens, tail = _tokens(ids[k], torch)
                assert tokens is not None and tail is not None
                probe.note(model, (ids[k],), {}, tokens, tail, torch)
                ids[k] = torch.cat((ids[k], torch.tensor([[40 + 10 * k + ids[k].shape[1]]])), 1)
        assert probe.kept is None  # each run one call short
        tokens, tail = _tokens(ids[1], torch)
        assert tokens is not None and tail is not None
        probe.note(model, (ids[1],), {}, tokens, tail, torch)
    assert probe.kept is not None and probe.kept.args[0] is ids[1]


def test_a_model_that_refuses_one_token_leaves_no_probe(tmp_path: Path) -> None:
    quiet: list[bool] = []
    probe = ContextProbe(lambda: tmp_path, quiet.append)
    _generate(probe, _TinyLM(refuse_one=True), 0, CONTEXT_RUN)
    probe.run(torch)
    assert not (tmp_path / CONTEXT_FILE).exists() and quiet == [True, False]
