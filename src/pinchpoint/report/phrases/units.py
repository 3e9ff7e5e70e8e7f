"""How numbers read in the phrasebook (the same helpers the rules used when they wrote prose)."""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30


def ms(ns: float) -> str:
    v = ns / 1e6
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def pct(frac: float) -> str:
    return f"{100 * frac:.0f}%"
