"""Interval-set arithmetic against a brute-force model on a grid of integer instants."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pinchpoint.analysis.gpu import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=12)


def arr(pairs: list[tuple[int, int]]) -> iv.Intervals:
    s = np.array([a for a, _ in pairs], dtype=np.int64)
    return s, s + np.array([d for _, d in pairs], dtype=np.int64)


def cells(pairs: list[tuple[int, int]]) -> set[int]:
    return {t for a, d in pairs for t in range(a, a + d)}


def cells_of(x: iv.Intervals) -> set[int]:
    return {t for a, b in zip(x[0].tolist(), x[1].tolist(), strict=True) for t in range(a, b)}


def canonical(x: iv.Intervals) -> bool:
    s, e = x
    return bool(np.all(e > s)) and bool(np.all(s[1:] > e[:-1]))


@given(spans)
def test_union_matches_brute_force(a: list[tuple[int, int]]) -> None:
    u = iv.union(*arr(a))
    assert canonical(u)
    assert cells_of(u) == cells(a)
    assert iv.total(arr(a)) == len(cells(a))


@given(spans, spans)
def test_intersect_and_subtract_match_brute_force(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    i = iv.intersect(arr(a), arr(b))
    d = iv.subtract(arr(a), arr(b))
    assert canonical(i) and canonical(d)
    assert cells_of(i) == cells(a) & cells(b)
    assert cells_of(d) == cells(a) - cells(b)


@given(spans, st.lists(st.integers(-2, 80), max_size=20))
def test_covered_by(a: list[tuple[int, int]], pts: list[int]) -> None:
    got = iv.covered_by(np.array(pts, dtype=np.int64), arr(a)).tolist()
    assert got == [p in cells(a) for p in pts]


def test_clip() -> None:
    assert cells_of(iv.clip(arr([(0, 10), (20, 5)]), 5, 22)) == set(range(5, 10)) | {20, 21}
