"""Two runs side by side: the step-time change and whether it is beyond the noise, per-phase and
per-finding changes, whether the top bottleneck moved, and what differs between the machines and
software the two ran on (a comparison across those is suspect)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, is_dataclass

from pinchpoint.report.document import to_dict
from pinchpoint.report.report_doc import ReportDoc
from pinchpoint.stats.bootstrap import NOISE_FLOOR, RatioTest, ratio_test


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSide:
    label: str
    """How the user named it: a run directory or a history id (`#12`)."""
    report: ReportDoc
    """Its report.json."""
    step_ns: tuple[int, ...]
    """Its steady step times (rank 0), for the significance test."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseChange:
    phase: str
    before_ms: float
    after_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class FindingChange:
    id: str
    before_share: float | None
    after_share: float | None
    before_speedup: float | None
    after_speedup: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDiff:
    before: str
    after: str
    test: RatioTest
    before_median_ms: float
    """The step the test compares (`test.statistic`: median, or mean where stalls hold much of the time)."""
    after_median_ms: float
    phases: tuple[PhaseChange, ...]
    findings: tuple[FindingChange, ...]
    before_top: str | None
    after_top: str | None
    shifted: bool
    """Both runs have a top finding and it is not the same one: the bottleneck moved."""
    environment_differences: tuple[str, ...]
    """Hardware or software that differs: the comparison is suspect."""
    setting_changes: tuple[str, ...]
    """Settings that differ (threads, DataLoader, autocast): often the fix itself."""
    run_ms: tuple[float, float] | None = None
    """The whole run's wall clock per training step, before and after (start-up, shutdown and
    pinchpoint's own work aside): where time outside the steps (rollouts, evaluation) held the run, a
    fix there shows here and not in the steps."""

    @property
    def speedup(self) -> float:
        return self.test.ratio


ENVIRONMENT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("CPU", ("cpu", "model")),
    ("usable cores", ("cpu", "usable_cores")),
    ("logical cores", ("cpu", "logical_cores")),
    ("memory", ("memory_bytes",)),
    ("torch", ("torch", "version")),
    ("CUDA", ("torch", "cuda")),
    ("Python", ("python",)),
    ("OS", ("os",)),
)
SETTING_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("intra-op threads", ("threads", "intra_op")),
    ("inter-op threads", ("threads", "inter_op")),
    ("thread variables", ("threads", "env")),
    ("autocast", ("autocast",)),
    ("DataLoader", ("dataloader",)),
)


def _get(obj: object, path: Sequence[str]) -> object:
    """The attribute at `path` (None where a part is missing: an older report, a CPU-only torch)."""
    for key in path:
        obj = getattr(obj, key, None)
    return obj


def _gpus(report: ReportDoc) -> list[str]:
    return [g.name for g in report.environment.gpus]


def _differences(a: ReportDoc, b: ReportDoc, fields: Sequence[tuple[str, tuple[str, ...]]]) -> list[str]:
    out = []
    for label, path in fields:
        x, y = _plain(_get(a.environment, path)), _plain(_get(b.environment, path))
        if x == y:
            continue
        if isinstance(x, Mapping) and isinstance(y, Mapping):  # the keys that changed, not every setting
            keys = [k for k in dict.fromkeys([*x, *y]) if x.get(k) != y.get(k)]
            x, y = {k: x.get(k) for k in keys}, {k: y.get(k) for k in keys}
        out.append(f"{label}: {_show(x)} → {_show(y)}")
    return out


def _plain(v: object) -> object:
    """A setting as JSON values: a section (the DataLoader's settings) as its mapping."""
    return to_dict(v) if is_dataclass(v) or isinstance(v, Mapping) else v


def _show(v: object) -> str:
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={v[k]}" for k in sorted(v)) or "none"
    return "none" if v is None else str(v)


def _mean_ms(report: ReportDoc) -> float:
    return report.steps.mean_ms or report.steps.median_ms or 0.0


OUTSIDE_RUN = ("start-up", "shutdown", "pinchpoint's own work")
"""Segments a per-step view of the whole run leaves out: once per run, or pinchpoint's."""
RUN_SAYS_BELOW = 0.9
"""The whole run is compared where the training steps held less than 90% of either run's time."""


def _run_ms(report: ReportDoc) -> tuple[float, float] | None:
    """(wall clock per training step, ms; the steps' share of it) from report.json's `run_time`."""
    if report.run_time is None:
        return None
    segments = report.run_time.segments
    steps = next((g for g in segments if g.name == "training steps"), None)
    if steps is None or steps.steps <= 0:
        return None
    seconds = sum(g.s for g in segments if g.name not in OUTSIDE_RUN)
    return seconds * 1e3 / steps.steps, steps.s / max(1e-9, seconds)


def _top(report: ReportDoc) -> str | None:
    return report.findings[0].id if report.findings else None


def diff_runs(before: RunSide, after: RunSide) -> RunDiff:
    test = ratio_test(before.step_ns, after.step_ns)
    a, b = before.report, after.report
    ma, mb = _mean_ms(a), _mean_ms(b)
    ba, bb = a.breakdown, b.breakdown
    phases = tuple(
        PhaseChange(phase=p, before_ms=ba.get(p, 0.0) * ma, after_ms=bb.get(p, 0.0) * mb)
        for p in dict.fromkeys([*ba, *bb])
        if ba.get(p, 0.0) or bb.get(p, 0.0)
    )
    fa = {f.id: f for f in a.findings}
    fb = {f.id: f for f in b.findings}
    findings = tuple(
        FindingChange(
            id=i,
            before_share=fa[i].share if i in fa else None,
            after_share=fb[i].share if i in fb else None,
            before_speedup=fa[i].estimated_speedup if i in fa else None,
            after_speedup=fb[i].estimated_speedup if i in fb else None,
        )
        for i in dict.fromkeys([*fa, *fb])
    )
    env = _differences(a, b, ENVIRONMENT_FIELDS)
    if _gpus(a) != _gpus(b):
        env.append(f"GPUs: {', '.join(_gpus(a)) or 'none'} → {', '.join(_gpus(b)) or 'none'}")
    wa, wb = a.run.world_size, b.run.world_size
    if wa != wb:
        env.append(f"ranks: {wa} → {wb}")
    top_a, top_b = _top(a), _top(b)
    ra, rb = _run_ms(a), _run_ms(b)
    whole = (ra[0], rb[0]) if ra and rb and min(ra[1], rb[1]) < RUN_SAYS_BELOW else None
    return RunDiff(
        before=before.label,
        after=after.label,
        test=test,
        before_median_ms=_median_ms(before) if test.statistic == "median" else _avg_ms(before),
        after_median_ms=_median_ms(after) if test.statistic == "median" else _avg_ms(after),
        phases=phases,
        findings=findings,
        before_top=top_a,
        after_top=top_b,
        shifted=top_a is not None and top_b is not None and top_a != top_b,
        environment_differences=tuple(env),
        setting_changes=tuple(_differences(a, b, SETTING_FIELDS)),
        run_ms=whole,
    )


def _avg_ms(side: RunSide) -> float:
    return sum(side.step_ns) / max(1, len(side.step_ns)) / 1e6


def _median_ms(side: RunSide) -> float:
    ns = sorted(side.step_ns)
    if not ns:
        return 0.0
    mid = len(ns) // 2
    return (ns[mid] if len(ns) % 2 else (ns[mid - 1] + ns[mid]) / 2) / 1e6


def verdict(d: RunDiff) -> list[str]:
    """What the diff means, in sentences (the terminal's headline and `check`'s reason)."""
    t = d.test
    change = 1 / t.ratio - 1
    lines = []
    interval = f"99% interval ×{t.low:.3f}–×{t.high:.3f}"
    if t.significant:
        how = f"×{t.ratio:.2f} faster" if t.ratio > 1 else f"×{1 / t.ratio:.2f} slower"
        lines.append(
            f"{d.after} is {how} than {d.before}: {t.statistic} step {d.before_median_ms:.2f} → "
            f"{d.after_median_ms:.2f} ms ({change:+.1%}; {interval}; {t.n_before} and {t.n_after} steps)"
        )
    else:
        why = (
            f"below the {NOISE_FLOOR:.0%} two runs of one program differ by here"
            if abs(t.ratio - 1) < NOISE_FLOOR
            else "the interval includes no change"
        )
        lines.append(
            f"No significant change: {t.statistic} step {d.before_median_ms:.2f} → {d.after_median_ms:.2f} ms "
            f"({change:+.1%}; {interval}): {why}"
        )
    if d.run_ms is not None and d.run_ms[1] > 0:
        x = d.run_ms[0] / d.run_ms[1]
        lines.append(
            f"The whole run (start-up and shutdown aside): {d.run_ms[0]:.1f} → {d.run_ms[1]:.1f} ms of wall "
            f"clock per training step, ×{x:.2f} {'faster' if x >= 1 else 'slower'}: the training steps "
            "are only part of it (rollouts, evaluation and the time between steps count here)"
        )
    if d.shifted:
        before = next((f for f in d.findings if f.id == d.before_top), None)
        after = next((f for f in d.findings if f.id == d.after_top), None)
        if before is None or before.after_share is None or before.before_share is None:
            fate = f"{d.before_top} is no longer found"
        else:
            fate = f"{d.before_top} fell to {before.after_share:.0%} of the step (from {before.before_share:.0%})"
        lead = f"{d.after_top} now leads"
        if after is not None and after.after_share is not None and after.after_speedup is not None:
            lead += f" at {after.after_share:.0%} of the step (its fix: est. ×{after.after_speedup:.2f})"
        lines.append(f"The bottleneck moved: {fate}; {lead}")
    elif d.before_top is not None and d.before_top == d.after_top:
        lines.append(f"The top bottleneck is still {d.before_top}")
    elif d.before_top is not None and d.after_top is None:
        lines.append(f"{d.before_top} is gone and nothing else is above the reporting thresholds")
    if d.environment_differences:
        lines.append(
            "The runs ran on different hardware or software, so the comparison is suspect: "
            + "; ".join(d.environment_differences)
        )
    return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class GateResult:
    failed: bool
    reason: str
    lines: tuple[str, ...]
    diff: RunDiff
    noise: float
    """How much slower than the typical baseline a run of the same program can be: the baselines' own
    spread plus NOISE_FLOOR."""


def gate(baselines: Sequence[RunSide], run: RunSide, allowed: float) -> GateResult:
    """`pinchpoint check`: fail when `run` is slower than the baseline beyond the noise and by more than
    `allowed`. With several baselines (runs of one program), the typical one is compared and their
    spread is the noise: a run-level shift that the baselines show among themselves is not a regression."""
    medians = [_median_ms(b) for b in baselines]
    order = sorted(range(len(baselines)), key=lambda i: medians[i])
    mid = order[(len(order) - 1) // 2]
    # How much slower than the typical baseline the slowest one ran: a run within that (plus the floor
    # two runs differ by anyway) is one more run like them.
    spread = max((m / medians[mid] - 1 for m in medians), default=0.0) if medians[mid] else 0.0
    noise = spread + NOISE_FLOOR
    d = diff_runs(baselines[mid], run)
    slowdown = 1 / d.test.ratio - 1
    beyond_noise = d.test.high < 1 and slowdown >= noise
    failed = beyond_noise and slowdown > allowed
    if failed:
        reason = (
            f"{d.after} is {slowdown:.1%} slower than {d.before} (allowed {allowed:.0%}), beyond the noise"
        )
    elif slowdown <= 0 or d.test.low > 1:
        reason = f"{d.after} is not slower than {d.before} ({slowdown:+.1%})"
    elif not beyond_noise:
        within = (
            f"the {len(baselines)} baselines differ by up to {spread:.1%} among themselves"
            if spread > 0
            else f"two runs of one program differ by up to {NOISE_FLOOR:.0%} here"
        )
        reason = f"{d.after} is {slowdown:+.1%} against {d.before}: within the noise ({within})"
    else:
        reason = f"{d.after} is {slowdown:.1%} slower than {d.before}: within the allowed {allowed:.0%}"
    return GateResult(failed=failed, reason=reason, lines=tuple(verdict(d)), diff=d, noise=noise)
