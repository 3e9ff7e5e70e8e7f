"""Programs written the way people write them, none of them with a plain `optimizer.step()` loop: an
LBFGS closure fit, a word LSTM with a hand-written SGD update, a nanoGPT-style char GPT trained from a
memmap (with evaluation batches in between) and its autoregressive sampler.

Each is run once under `pinchpoint run`; the steps pinchpoint counted must be the program's own
(optimizer steps, updates, generated tokens), its forward/backward/update medians the program's own
clocks, and its top finding the cause whose fix examples/TRUTH.md measured on this machine kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pinchpoint.analysis.steps import step_stats
from pinchpoint.ingest.rundir import read_run_dir
from pinchpoint.trace.run import StepKind
from programs import (
    CONTENDED_CORES,
    EXAMPLES,
    PHASE_TOLERANCE,
    SHRUNK_PHASE_MAX,
    foreign_cores,
    own_medians_over_pinchpoints_steps,
    phases_match_the_programs_own_timing,
    planted,
    programs_own,
    report_of,
    run_program,
    segments_cover_the_run,
    summary,
)
from truth import acceptable_tops, holds_now, machine_truth, missing_row, without_a_row

pytestmark = pytest.mark.e2e


def _train_steps(out: Path) -> list[Any]:
    return [s for s in read_run_dir(out).ranks[0].steps if s.kind is StepKind.TRAIN and not s.partial]


MEASURED_SHARE_MIN = 0.15
"""The planted cause is real on this machine kind: its fix removed at least 15% of the step."""


def _top_is_the_measured_cause(report: dict[str, Any], example: str) -> None:
    """The top finding is a cause whose fix measured the most here (the planted one, or allocator churn
    where glibc's thresholds measured as much: examples/TRUTH.md's `glibc env` rows)."""
    (cause,) = planted(EXAMPLES / f"{example}.py")
    if foreign_cores(report) < CONTENDED_CORES:
        without_a_row(example, [cause], programs_own(report), summary(report))
    elif missing_row(example) is not None:
        pytest.skip(missing_row(example))
    tops = acceptable_tops(example, cause, MEASURED_SHARE_MIN)
    if not tops:  # (the steps, phases and evaluation were checked before this)
        pytest.skip(
            f"no cause of {example} is real on this machine kind: its fixes measured "
            f"{machine_truth()[example]} of the step, none {MEASURED_SHARE_MIN:.0%}"
        )
    findings = programs_own(report)
    lead = report["findings"][0] if report["findings"] else None
    contended = foreign_cores(report) >= CONTENDED_CORES
    if contended and lead is not None and _measured_thread_fix(lead):
        # Beside a busy process the program's two intra-op threads spin at OpenMP barriers against a
        # descheduled one: measured here, char_gpt_sample.py went from 2.5 to 5.9 ms a token, and the
        # thread trial's one thread paid x2.0 (whole runs x2.3). That measured fix leads; the window's
        # large ops are inflated x5 by the same spin, so the batching fix is seen only once it is applied.
        return
    if contended and len(findings) > 1 and findings[1]["id"] in tops:
        # ...or one place lower, as every example beside a busy process (programs.holds_beside_busy_
        # neighbours): the LBFGS fit's probe-backed bf16 finding (x1.74) led host.dispatch (x1.64) there
        return
    if contended and findings and all(f["estimated_speedup"] <= 1.0 for f in findings):
        # ...or, in another loaded run of the sampler, neither was seen: only "compute-bound" (97%), and
        # no fix offered. A miss beside a busy process, never a wrong fix: the truth is the idle one's.
        return
    assert findings, summary(report)
    if findings[0]["id"] not in tops:
        # the stored rows disagree, or this kind has no row for the lead's fix: measured again now
        wrong = holds_now(
            example, cause, findings[0]["id"], cause in [f["id"] for f in findings], MEASURED_SHARE_MIN
        )
        assert not wrong, f"{wrong}; stored tops {sorted(tops)}; {summary(report)}"


def _measured_thread_fix(finding: dict[str, Any]) -> bool:
    return bool(finding["id"] == "cpu.oversubscription" and finding.get("estimate_basis") == "trial")


def test_lbfgs_closure_fit(tmp_path: Path) -> None:
    own, out, _ = run_program(EXAMPLES / "lbfgs_sequence.py", tmp_path, "--steps", "30", own_clock=True)
    steps = _train_steps(out)
    assert len(steps) == own["steps"]
    # every evaluation of the closure is a forward and a backward inside its optimizer step
    assert sum(sum(iv.phase.value == "backward" for iv in s.intervals) for s in steps) == own["closures"]
    phases_match_the_programs_own_timing(out, own)
    segments_cover_the_run(out)
    _top_is_the_measured_cause(report_of(out), "lbfgs_sequence")


@pytest.fixture(scope="module")
def word_lstm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], Path]:
    own, out, _ = run_program(
        EXAMPLES / "lstm_manual_sgd.py", tmp_path_factory.mktemp("lstm"), "--steps", "50", own_clock=True
    )
    return own, out


def test_manual_sgd_word_lstm_steps_and_compute_phases(word_lstm: tuple[dict[str, float], Path]) -> None:
    own, out = word_lstm
    # no torch.optim: the last update's step ends with the program (partial)
    assert len(_train_steps(out)) in (own["steps"] - 1, own["steps"])
    phases_match_the_programs_own_timing(out, own, update=False)


def test_manual_sgd_word_lstm_update_phase_is_the_update_alone(
    word_lstm: tuple[dict[str, float], Path],
) -> None:
    own, out = word_lstm
    phases_match_the_programs_own_timing(out, own)


def test_manual_sgd_word_lstm_top_finding(word_lstm: tuple[dict[str, float], Path]) -> None:
    # Two causes measured here: the planted tokenizer (x1.08-1.12) and glibc's churn (x1.29). How much a
    # run churns depends on its allocation history (glibc moves its thresholds as blocks are freed): runs
    # here reported none, a little (below the tokenizer) or a quarter of the step. The top finding must
    # be one of the two measured causes, and the tokenizer must be named in every run.
    report = report_of(word_lstm[1])
    findings = programs_own(report)
    ids = [f["id"] for f in findings]
    lead = findings[0] if findings else {}
    # On a CPU with native bf16 (avx512_bf16 EPYC) autocast may lead: fp32 matmuls are a third of the
    # step and the probe measured this CPU's bf16 matmul x5 faster. That cause has no truth row yet
    # (the example has no bf16 switch), so it is accepted only as that probe-backed fix.
    bf16_lead = lead.get("fix_kind") == "bf16_autocast" and bool(report["environment"]["cpu"]["matrix_units"])
    assert ids and (ids[0] in {"memory.pressure", "host.python"} or bf16_lead), ids
    if foreign_cores(report) >= CONTENDED_CORES and "host.python" not in ids:
        # Beside a busy process the compute stretches and the tokenizer's Python falls to the 5% the
        # rule reports from (loaded runs: Python outside the phases at 5.0%, 5.7% and 6.5%, named in the
        # last two): then it must be that small (programs.holds_beside_busy_neighbours' "shrinks")
        assert report["breakdown"]["host_other"] < SHRUNK_PHASE_MAX, report["breakdown"]
        return
    assert "host.python" in ids, ids


def test_memmap_char_gpt_with_evaluation(tmp_path: Path) -> None:
    own, out, _ = run_program(EXAMPLES / "char_gpt_memmap.py", tmp_path, "--steps", "50", own_clock=True)
    assert len(_train_steps(out)) == own["steps"]
    report = report_of(out)
    assert report["steps"]["eval_count"] == own["eval_batches"]
    phases_match_the_programs_own_timing(out, own)
    segments_cover_the_run(out)
    _top_is_the_measured_cause(report, "char_gpt_memmap")


@pytest.fixture(scope="module")
def sampler(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], Path]:
    own, out, _ = run_program(
        EXAMPLES / "char_gpt_sample.py", tmp_path_factory.mktemp("sample"), "--num-samples", "4"
    )
    return own, out


def test_autoregressive_sampler_has_a_step_per_token(sampler: tuple[dict[str, float], Path]) -> None:
    own, out = sampler
    steps = [s for s in read_run_dir(out).ranks[0].steps if not s.partial]
    assert {s.kind for s in steps} == {StepKind.INFERENCE}
    assert len(steps) in (own["steps"] - 1, own["steps"])  # one step per generated token


def test_autoregressive_sampler_leads_with_its_largest_measured_fix(
    sampler: tuple[dict[str, float], Path],
) -> None:
    """Two real causes: one sample at a time (batching, host.dispatch) and no KV cache (compute.recompute);
    the one whose fix measured more here leads."""
    _, out = sampler
    _top_is_the_measured_cause(report_of(out), "char_gpt_sample")


def test_autoregressive_sampler_kv_cache_is_priced_by_its_own_call(
    sampler: tuple[dict[str, float], Path],
) -> None:
    """The context probe replayed the sampler's own call whole and cut to its last token at exit, and
    compute.recompute is priced from it (not the fitted line); its time is pinchpoint's, not the program's."""
    _, out = sampler
    probe = read_run_dir(out).ranks[0].context_cost
    assert probe is not None and 32 < probe.tokens <= 32 + 40, probe  # a call of the generation (prompt 32)
    report = report_of(out)
    (found,) = [f for f in report["findings"] if f["id"] == "compute.recompute"]
    assert found["estimate_basis"] == "probe", summary(report)
    assert any("last token alone" in e for e in found["evidence"]), found["evidence"]


@pytest.fixture(scope="module")
def hf_generate(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], Path]:
    own, out, _ = run_program(
        EXAMPLES / "hf_generate.py", tmp_path_factory.mktemp("generate"), "--prompts", "6", own_clock=True
    )
    return own, out


def test_model_generate_has_a_step_per_forward_pass(hf_generate: tuple[dict[str, float], Path]) -> None:
    own, out = hf_generate
    steps = [s for s in read_run_dir(out).ranks[0].steps if not s.partial]
    assert {s.kind for s in steps} == {StepKind.INFERENCE}
    assert len(steps) in (own["steps"] - 1, own["steps"])  # one step per generated token (per prompt)
    stats = step_stats(read_run_dir(out).ranks[0])
    assert stats is not None
    forward = stats.phase_median_ns.get("forward", 0) / 1e6
    # the model's own forward hooks time the same call pinchpoint's module hook does
    own = own_medians_over_pinchpoints_steps(out, own)
    assert abs(forward - own["forward_ms"]) <= PHASE_TOLERANCE * own["forward_ms"] + 1.0, (forward, own)


def test_model_generate_is_told_to_batch(hf_generate: tuple[dict[str, float], Path]) -> None:
    _top_is_the_measured_cause(report_of(hf_generate[1]), "hf_generate")


def test_gpt2_trainer_with_the_configs_defaults(tmp_path: Path) -> None:
    """A transformers GPT-2 causal-LM fine-tune (examples/hf_clm.py) with GPT2Config's defaults: attention
    dropout keeps a CPU off SDPA's fused kernel, and gelu_new is eight elementwise ops. Once told "write
    attention with SDPA" (it already does): the finding must name the dropout and the GELU, at about the
    share their fix measured, beside the causes whose fixes measured more (examples/TRUTH.md)."""
    own, out, _ = run_program(EXAMPLES / "hf_clm.py", tmp_path, "--steps", "60", own_clock=True)
    assert len(_train_steps(out)) == own["steps"]
    segments_cover_the_run(out)
    report = report_of(out)
    assert report["steps"]["eval_count"] == own["eval_batches"]
    phases_match_the_programs_own_timing(out, own)
    by_id = {f["id"]: f for f in programs_own(report)}
    assert "compute.memory" in by_id, list(by_id)
    attention = by_id["compute.memory"]
    assert "falls back to op-by-op math" in attention["title"], attention["title"]
    assert "attn_pdrop=0.0" in attention["fix"], attention["fix"]
    # (gelu_new's chains are named beside it only when fusing them gives back 5% of the step: their
    # estimate sits at that line here, named in some runs and not others, idle and loaded; its fix
    # measured x1.09-1.16 by hand)
    if foreign_cores(report) < CONTENDED_CORES and missing_row("hf_clm") is None:
        measured = machine_truth()["hf_clm"]["--fix"]
        assert abs(attention["share"] - measured) <= SHARE_TOLERANCE, (attention["share"], measured)
    _top_is_the_measured_cause(report, "hf_clm")  # (last: it skips where this kind has no truth row)


SHARE_TOLERANCE = 0.10
"""As tests/test_examples_e2e.py: a reported share within 10 points of the share its fix removed."""


@pytest.mark.parametrize("program", ["word_lstm", "sampler", "hf_generate"])
def test_named_segments_cover_the_run(program: str, request: pytest.FixtureRequest) -> None:
    """Issue 32's partition of the run, on the runs made above (test_examples_e2e.py leaves these
    examples to their own tests)."""
    _, out = request.getfixturevalue(program)
    segments_cover_the_run(out)
