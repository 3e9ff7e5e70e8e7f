"""Rules state facts; the phrasebook words them. Every fact a rule builds has a phrase taking exactly its
values, and every phrase is used: checked from the source, so a new fact without words fails here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import pinchpoint
from pinchpoint.diagnosis.finding import Fact, Unit, unit_of
from pinchpoint.report.phrases import PHRASES, _merged, say

SRC = Path(pinchpoint.__file__).resolve().parent
DIAGNOSIS = sorted(p for p in (SRC / "diagnosis").rglob("*.py") if "__pycache__" not in p.parts)


def fact_calls() -> list[tuple[str, str, frozenset[str] | None]]:
    """(where, key, keyword names, or None when the call passes **kwargs) of every `Fact("key", ...)`."""
    out = []
    for path in DIAGNOSIS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Fact"
            ):
                continue
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), (
                f"{path.name}:{node.lineno}: a fact's key is a literal string"
            )
            names = [k.arg for k in node.keywords]
            keywords = None if None in names else frozenset(n for n in names if n is not None)
            out.append((f"{path.relative_to(SRC)}:{node.lineno}", first.value, keywords))
    return out


CALLS = fact_calls()


def test_rules_state_facts() -> None:
    assert len(CALLS) >= 10


@pytest.mark.parametrize(("where", "key", "names"), CALLS, ids=[c[0] for c in CALLS])
def test_every_fact_has_a_phrase_taking_its_values(
    where: str, key: str, names: frozenset[str] | None
) -> None:
    assert key in PHRASES, f"{where}: no phrase for {key!r}"
    params = inspect.signature(PHRASES[key]).parameters
    if names is not None and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        assert names == frozenset(params), (where, key, sorted(names), sorted(params))


def test_every_phrase_is_stated_by_some_rule() -> None:
    used = {key for _, key, _ in CALLS}
    assert set(PHRASES) <= used, sorted(set(PHRASES) - used)


def test_a_key_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        _merged(({"a": lambda: "x"}, {"a": lambda: "y"}))


def test_nested_facts_are_phrased_first() -> None:
    inner = Fact("rule.title", name="Slow loader")
    outer = Fact("merge.why_late", ranks=(1,), category="input.fetch", title=inner)
    assert say(outer) == "Why rank 1 is late (input.fetch): Slow loader"


def test_a_fact_without_a_phrase_says_so() -> None:
    with pytest.raises(KeyError, match="no phrase for fact 'nope'"):
        say(Fact("nope"))


@pytest.mark.parametrize(
    ("name", "value", "unit"),
    [
        ("wait_ns", 1.0, Unit.NS),
        ("share", 0.3, Unit.FRACTION),
        ("idle_share", 0.3, Unit.FRACTION),
        ("storage_bytes", 10, Unit.BYTES),
        ("speedup", 1.2, Unit.RATIO),
        ("steps", 20, Unit.COUNT),
        ("module", "tokenizers", Unit.TEXT),
        ("bounded", True, Unit.TEXT),
    ],
)
def test_units_are_read_from_names(name: str, value: float | str, unit: Unit) -> None:
    assert unit_of(name, value) is unit
