"""How numbers read in the phrasebook (the same helpers the rules used when they wrote prose)."""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30


def ms(ns: float) -> str:
    v = ns / 1e6
    return f"{v:.1f} ms" if v >= 10 else f"{v:.2f} ms"


def pct(frac: float) -> str:
    return f"{100 * frac:.0f}%"


def us(ns: float) -> str:
    return f"{ns / 1e3:.1f} µs"


def mib(n_bytes: float, digits: int = 2) -> str:
    return f"{n_bytes / MIB:.{digits}f} MiB"
