"""The end-to-end tests' truth on a CPU kind never seen: only its own rows, and what holds anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import truth


@pytest.fixture
def new_kind(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """This machine read as a kind examples/TRUTH.md has no section for (one with native bf16)."""
    monkeypatch.setattr(truth, "machine_kind", lambda: "vendor-avx1024-bf16")
    yield "vendor-avx1024-bf16"


def _finding(cid: str, speedup: float) -> dict[str, object]:
    return {"id": cid, "share": 0.3, "estimated_speedup": speedup}


def test_a_kind_without_rows_borrows_none(new_kind: str) -> None:
    assert truth.machine_truth() == {}
    reason = truth.missing_row("hf_clm")
    assert reason is not None and new_kind in reason and "hf_clm" in reason and "--missing" in reason
    assert truth.acceptable_tops("hf_clm", "compute.memory", 0.15) == set()


def test_the_ordering_is_skipped_once_what_holds_anywhere_held(new_kind: str) -> None:
    findings = [_finding("compute.math", 1.3), _finding("compute.memory", 1.15)]
    with pytest.raises(pytest.skip.Exception, match=r"no vendor-avx1024-bf16 row for hf_clm"):
        truth.without_a_row("hf_clm", ["compute.memory"], findings, "")


def test_the_planted_cause_must_be_named_anywhere(new_kind: str) -> None:
    with pytest.raises(AssertionError):
        truth.without_a_row("hf_clm", ["compute.memory"], [_finding("compute.math", 1.3)], "")


def test_no_gain_promised_for_a_fix_that_measured_slower_on_the_nearest_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a new kind without native bf16, the nearest is the AVX2 EPYC, where glibc's thresholds made
    the LBFGS fit x0.67 as fast: no memory.pressure finding may promise a gain there."""
    monkeypatch.setattr(truth, "machine_kind", lambda: "vendor-avx1024")
    kind, speedups = truth.nearest_truth("lbfgs_sequence") or ("", {})
    assert not kind.endswith(truth.NATIVE_BF16) and speedups["glibc env (memory.pressure)"] < truth.SLOWER
    findings = [_finding("host.dispatch", 2.0), _finding("memory.pressure", 1.2)]
    with pytest.raises(AssertionError, match=r"memory\.pressure promises a gain"):
        truth.without_a_row("lbfgs_sequence", ["host.dispatch"], findings, "")
    with pytest.raises(pytest.skip.Exception):
        truth.without_a_row("lbfgs_sequence", ["host.dispatch"], [_finding("host.dispatch", 2.0)], "")


def test_a_fix_measured_only_in_the_other_bf16_class_says_nothing(new_kind: str) -> None:
    """bf16 runs x40-177 slower where it is emulated: an AVX2 row cannot speak for a native-bf16 kind."""
    examples = {e for rows in truth.sections().values() for e in rows}
    for example in examples:
        nearest = truth.nearest_truth(example)
        assert nearest is None or nearest[0].endswith(truth.NATIVE_BF16), (example, nearest)


def test_this_kinds_own_rows_are_read_and_nothing_is_skipped() -> None:
    own = truth.sections().get(truth.machine_kind(), {})
    for example in own:
        assert truth.missing_row(example) is None
        truth.without_a_row(example, [], [], "")  # returns: the ordering is checked against the row


@pytest.fixture
def measured_now(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """What `live_causes` measures now, set by the test (the real one runs the examples: e2e tests)."""
    shares: dict[str, float] = {}
    monkeypatch.setattr(
        truth, "live_causes", lambda example, planted, causes: {c: shares[c] for c in causes if c in shares}
    )
    return shares


def test_a_top_the_stored_row_rejects_stands_if_its_fix_measures_as_much_now(
    measured_now: dict[str, float],
) -> None:
    measured_now.update({"input.preprocess": 0.30, "memory.pressure": 0.25})
    assert truth.holds_now("input_preprocess", "input.preprocess", "memory.pressure", True, 0.15) == ""
    measured_now["memory.pressure"] = 0.02  # the trial's x1.27 does not hold in whole runs
    wrong = truth.holds_now("input_preprocess", "input.preprocess", "memory.pressure", True, 0.15)
    assert wrong.startswith("memory.pressure leads") and "memory.pressure +2%" in wrong


def test_a_missing_planted_cause_fails_while_its_fix_still_pays(measured_now: dict[str, float]) -> None:
    measured_now["cpu.oversubscription"] = 0.26
    wrong = truth.holds_now("cpu_oversubscription", "cpu.oversubscription", "compute.math", False, 0.15)
    assert "not named" in wrong
    measured_now["cpu.oversubscription"] = 0.05  # the fix no longer pays here: compute leads, rightly
    assert truth.holds_now("cpu_oversubscription", "cpu.oversubscription", "compute.math", False, 0.15) == ""
