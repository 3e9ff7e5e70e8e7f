"""host.python names whose Python it is: a loop whose hot lines sit inside a library's own code (a
Gaussian-process library's lazy tensors) gets no template advice and no promised gain; one without
stack samples says its advice is the common cause, not this program's measured one."""

from __future__ import annotations

from dataclasses import replace

from conftest import make_env, make_rank_analysis, make_run_analysis
from pinchpoint.analysis.stacks import HotFunction, StackScope, StackSummary
from pinchpoint.diagnosis.engine import diagnose
from pinchpoint.diagnosis.finding import Basis, Category, facts
from pinchpoint.diagnosis.rules.host import library_owned
from pinchpoint.report.phrases import say
from pinchpoint.trace.stacks import Frame


def _hot(label: str, share: float, into: str | None) -> HotFunction:
    return HotFunction(
        frame=Frame(function=label, file="fit.py", line=3), label=label, share=share, calls_into=into
    )


GP = StackScope(
    name="host", samples=400, seconds=20.0,
    top=(_hot("train (fit.py:30)", 0.55, "_matmul (gpytorch/lazy/lazy_tensor.py)"),
         _hot("train (fit.py:31)", 0.15, "evaluate (linear_operator/operators/_linear_operator.py)"),
         _hot("train (fit.py:35)", 0.10, "item (torch/_tensor.py)")),
)  # fmt: skip
LOOP = StackScope(
    name="host",
    samples=400,
    seconds=20.0,
    top=(
        _hot("metrics (train.py:40)", 0.7, "tolist (torch/_tensor.py)"),
        _hot("log (train.py:52)", 0.2, None),
    ),
)


def _python_finding(stacks: StackSummary | None) -> object:
    analysis = replace(make_rank_analysis({"forward": 20}, 30), stacks=stacks)
    found = diagnose(make_run_analysis(make_env(), [analysis])).findings
    return next(f for f in found if f.id is Category.HOST_PYTHON)


def test_python_inside_a_library_promises_nothing() -> None:
    assert library_owned(GP) == ("gpytorch", "_matmul (gpytorch/lazy/lazy_tensor.py)", 0.55)
    f = _python_finding(StackSummary(host=GP))
    assert f.estimated_speedup == 1.0 and f.basis is Basis.NONE and f.fix_kind is None  # type: ignore[attr-defined]
    assert "inside gpytorch's own code" in say(facts(f)["host.python.library"])  # type: ignore[arg-type]
    assert "no gain is predicted" in say(f.fix)  # type: ignore[attr-defined]


def test_the_loops_own_python_keeps_its_fix_and_price() -> None:
    assert library_owned(LOOP) is None  # .tolist() over tensors is the loop's doing
    f = _python_finding(StackSummary(host=LOOP))
    assert f.estimated_speedup > 1.3 and f.basis is Basis.REMOVED  # type: ignore[attr-defined]
    assert "host.python.unnamed" not in facts(f)  # type: ignore[arg-type]


def test_without_stacks_the_advice_says_it_is_generic() -> None:
    f = _python_finding(None)
    assert "not this program's measured one" in say(facts(f)["host.python.unnamed"])  # type: ignore[arg-type]
