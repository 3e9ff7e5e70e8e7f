"""The phrasebook: how each fact a rule states reads in a report. One entry per `Fact.key`.

An entry is a function of the fact's values, by name; facts nested in a fact's values are phrased
first. Add a bottleneck category's wording as a module here and one line in `BOOKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pinchpoint.diagnosis.finding import Fact
from pinchpoint.report.phrases import (
    comm,
    common,
    compile,
    compile_trace,
    compute,
    cpu,
    frameworks,
    gc,
    generation,
    gpu,
    host,
    input,
    memory,
    merge,
    native,
    notes,
    outside,
    run,
    serving,
    whatif,
)

Phrase = Callable[..., str]

BOOKS: tuple[Mapping[str, Phrase], ...] = (
    comm.PHRASES,
    common.PHRASES,
    compile.PHRASES,
    compile_trace.PHRASES,
    compute.PHRASES,
    cpu.PHRASES,
    frameworks.PHRASES,
    gc.PHRASES,
    generation.PHRASES,
    gpu.PHRASES,
    host.PHRASES,
    input.PHRASES,
    memory.PHRASES,
    merge.PHRASES,
    native.PHRASES,
    notes.PHRASES,
    outside.PHRASES,
    run.PHRASES,
    serving.PHRASES,
    whatif.PHRASES,
)


def _merged(books: tuple[Mapping[str, Phrase], ...]) -> dict[str, Phrase]:
    out: dict[str, Phrase] = {}
    for book in books:
        doubled = set(out) & set(book)
        if doubled:
            raise ValueError(f"phrasebook keys defined twice: {sorted(doubled)}")
        out.update(book)
    return out


PHRASES: dict[str, Phrase] = _merged(BOOKS)


def _value(v: Any) -> Any:
    if isinstance(v, Fact):
        return say(v)
    if isinstance(v, tuple):
        return tuple(_value(x) for x in v)
    return v


def say(text: Fact) -> str:
    """A fact in words."""
    phrase = PHRASES.get(text.key)
    if phrase is None:
        raise KeyError(f"no phrase for fact {text.key!r} (add it to a module of report/phrases/)")
    return phrase(**{k: _value(v) for k, v in text.values})


def say_all(texts: tuple[Fact, ...]) -> list[str]:
    return [say(t) for t in texts]
