"""Shares that add up: a finding never claims more of the step than the phases its time is spent in.

Some shares are read from the steady steps' phases (a data wait, the Python outside every phase), others
from the op window (fp32 matmuls, elementwise traffic, per-op overhead) or a model over it. On a loaded
machine, or when the window caught a slower stretch, the window's share of *its* step can exceed what
the same phases take of the steady steps: "compute 21% of the step" beside forward+backward+optimizer at
11%. Where findings are assembled, each phase-bound share is capped at its phases' share of the steady
steps, the causes that share phases are capped together, and an estimate never saves more of the step
than its capped share (a trial's measured speedup stands: it timed the program's own steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pinchpoint.analysis.run_analysis import RankAnalysis
from pinchpoint.diagnosis.finding import Basis, Category, Fact, Finding
from pinchpoint.trace.run import HOST_OTHER, Phase

_COMPUTE = (Phase.FORWARD.value, Phase.BACKWARD.value, Phase.OPTIMIZER.value)
LIVES_IN: Mapping[Category, tuple[str, ...]] = {
    Category.INPUT_FETCH: (Phase.DATA_WAIT.value,),
    Category.INPUT_PREPROCESS: (Phase.DATA_WAIT.value,),
    Category.HOST_PYTHON: (HOST_OTHER,),
    Category.COMPUTE_MATH: _COMPUTE,
    Category.COMPUTE_MEMORY: (*_COMPUTE, HOST_OTHER),
    Category.HOST_DISPATCH: (*_COMPUTE, HOST_OTHER),
}
"""The phases each kind of time is spent in (functional losses and metrics run outside every module,
so elementwise work and per-op overhead reach into the host's other time). The other categories span the
whole step: io.checkpoint too, whose write-back slows the steps after a save (`analysis/checkpoint.py`)."""
SHARED = (Category.COMPUTE_MATH, Category.COMPUTE_MEMORY, Category.HOST_DISPATCH, Category.HOST_PYTHON)
"""Causes whose phases overlap, capped together by the union of their phases; reduced in this order
(the compute summary is what the others leave; Python outside every phase is read from the steps)."""
EPS = 1e-6


def bound_shares(by_id: dict[Category, Finding], ranks: Sequence[RankAnalysis]) -> None:
    """Cap each phase-bound finding at its phases' share of its ranks' steady steps, then the causes that
    share phases at the share of their union."""
    for cid, f in list(by_id.items()):
        where = LIVES_IN.get(cid)
        bound = _phase_share(ranks, f.ranks, where) if where is not None else None
        if bound is not None and f.share > bound + EPS:
            by_id[cid] = _capped(f, bound, where or ())
    present = [c for c in SHARED if c in by_id]
    union = tuple(dict.fromkeys(p for c in present for p in LIVES_IN[c]))
    ranks_of = tuple(sorted({r for c in present for r in by_id[c].ranks}))
    bound = _phase_share(ranks, ranks_of, union)
    if bound is None:
        return
    excess = sum(by_id[c].share for c in present) - bound
    for cid in present:
        if excess <= EPS:
            return
        f = by_id[cid]
        cut = min(f.share, excess)
        by_id[cid] = _capped(f, f.share - cut, union)
        excess -= cut


def _phase_share(ranks: Sequence[RankAnalysis], of: Sequence[int], phases: Sequence[str]) -> float | None:
    """The largest share `phases` take of a steady step on the ranks `of` (None without steps)."""
    shares = [sum(r.steps.share(p) for p in phases) for r in ranks if r.rank in of and r.steps is not None]
    return max(shares) if shares else None


def _capped(f: Finding, share: float, phases: Sequence[str]) -> Finding:
    share = max(0.0, share)
    speedup = f.estimated_speedup
    if f.basis is not Basis.TRIAL and speedup > 1.0:
        saved = min(1.0 - 1.0 / speedup, share, 0.95)
        speedup = max(1.0, 1.0 / (1.0 - saved))
    bounded = Fact("merge.share_bounded", claimed=f.share, share=share, phases=tuple(phases))
    return replace(f, share=share, estimated_speedup=speedup, evidence=(*f.evidence, bounded))
