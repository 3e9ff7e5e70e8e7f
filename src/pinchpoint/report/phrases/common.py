"""Phrases every category uses: a rule's own name as a finding's title."""

from __future__ import annotations

from collections.abc import Callable

PHRASES: dict[str, Callable[..., str]] = {
    "rule.title": lambda name: name,
}
